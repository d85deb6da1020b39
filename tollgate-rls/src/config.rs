//! [`RlsConfig`]: the reference's YAML files compiled into one tree of descriptors per domain,
//! checked as the reference checks them (same rules, same messages, each naming its file).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

use super::counters::Counters;
use super::yaml::{self, YamlDescriptor, YamlRateLimit, YamlRoot};
use tollgate::rules::Lease;
use tollgate::store::Policy;
use tollgate::Algorithm;
use tollgate::Quota;
use tollgate::{ConfigError, ConfigErrorKind};

/// What [`RlsConfig::from_yaml`] does with a domain found in more than one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DuplicateDomains {
    /// Refuse the configuration, naming the domain: the reference's default.
    #[default]
    Refuse,
    /// Merge their descriptors (the reference's `MERGE_DOMAIN_CONFIG`).
    Merge,
}

/// The rate limits of every domain, as loaded from the reference's YAML files.
///
/// ```
/// use tollgate_rls::{DuplicateDomains, RlsConfig};
///
/// let yaml = "
/// domain: edge
/// descriptors:
///   - key: remote_address
///     rate_limit: { unit: minute, requests_per_unit: 100 }
/// ";
/// let config = RlsConfig::from_yaml([("edge.yaml", yaml)], DuplicateDomains::Refuse)?;
/// assert_eq!(config.domains().collect::<Vec<_>>(), ["edge"]);
///
/// let bad = "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight }\n";
/// let e = RlsConfig::from_yaml([("bad.yaml", bad)], DuplicateDomains::Refuse).unwrap_err();
/// assert_eq!(e.to_string(), "bad.yaml: invalid rate limit unit 'fortnight'");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct RlsConfig {
    pub(super) domains: Map,
}

/// Domains, or one level's children, by name. foldhash: faster than SipHash on every lookup,
/// and only the configuration (not requests) inserts keys.
pub(super) type Map = HashMap<String, Node, foldhash::fast::RandomState>;

/// One level of descriptors: what its children are keyed by (`key` or `key_value`), the
/// wildcard patterns among them, and the limit at this level.
#[derive(Debug, Clone, Default)]
pub(super) struct Node {
    pub(super) children: Map,
    /// The children whose `key_value` holds a `*`, in the file's order, split on `*`.
    pub(super) wildcards: Vec<Wildcard>,
    pub(super) limit: Option<Arc<Limit>>,
    pub(super) value_to_metric: bool,
    pub(super) share_threshold: bool,
}

/// A child keyed by a pattern such as `path_/api*v1`.
#[derive(Debug, Clone)]
pub(super) struct Wildcard {
    pub(super) key: String,
    pub(super) parts: Vec<String>,
}

/// A `rate_limit` block, compiled.
#[derive(Debug, Clone)]
pub(crate) struct Limit {
    /// The reference's name for its statistics: the domain and the path of keys to it
    /// (`domain.key1_value1.subkey1`).
    pub(crate) full_key: String,
    pub(crate) requests_per_unit: u32,
    pub(crate) unit: Unit,
    pub(crate) name: String,
    pub(crate) replaces: Vec<String>,
    pub(crate) unlimited: bool,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) detailed_metric: bool,
    /// What the store enforces; `None` when unlimited, or when nothing is allowed
    /// (`requests_per_unit: 0`), which needs no store.
    pub(crate) policy: Option<Policy>,
    /// Its descriptor's YAML `metadata`, for the dynamic metadata of a request it passes.
    pub(crate) metadata: Option<envoy_types::pb::google::protobuf::Struct>,
    /// Its statistics' counters, found once.
    pub(crate) counters: Counters,
}

impl RlsConfig {
    /// Compiles files given as `(name, content)`, in order; the name is what errors show.
    /// A domain in two files is an error, or merged: see [`DuplicateDomains`].
    pub fn from_yaml<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
        duplicates: DuplicateDomains,
    ) -> Result<Self, ConfigError> {
        let merge_domains = duplicates == DuplicateDomains::Merge;
        let mut config = Self::default();
        for (name, content) in files {
            config.load_file(content, merge_domains).map_err(|why| {
                ConfigError::with_kind(ConfigErrorKind::RulesFile, format!("{name}: {why}"))
            })?;
        }
        Ok(config)
    }

    /// The domains, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// Whether no domain is configured.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Every limit, one line each and sorted, as the reference's `/rlconfig` prints them
    /// (with the algorithm when it is not the default fixed window).
    pub fn dump(&self) -> String {
        let mut lines = Vec::new();
        for domain in self.domains.values() {
            domain.dump(&mut lines);
        }
        lines.sort();
        lines.concat()
    }

    pub(super) fn load_file(&mut self, content: &str, merge: bool) -> Result<(), String> {
        self.load_root(yaml::parse(content)?, merge)
    }

    /// Compiles files already read into the YAML's structs (from xDS resources), with the
    /// same checks and messages as [`from_yaml`](Self::from_yaml).
    pub(super) fn from_roots(
        roots: impl IntoIterator<Item = (String, YamlRoot)>,
        merge_domains: bool,
    ) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        for (name, root) in roots {
            config.load_root(root, merge_domains).map_err(|why| {
                ConfigError::with_kind(ConfigErrorKind::RulesFile, format!("{name}: {why}"))
            })?;
        }
        Ok(config)
    }

    fn load_root(&mut self, root: YamlRoot, merge: bool) -> Result<(), String> {
        if root.domain.is_empty() {
            return Err("config file cannot have empty domain".into());
        }
        let parent = format!("{}.", root.domain);
        match self.domains.get_mut(&root.domain) {
            Some(_) if !merge => Err(format!("duplicate domain '{}' in config file", root.domain)),
            Some(domain) => domain.load(&parent, &root.descriptors),
            None => {
                let mut domain = Node::default();
                domain.load(&parent, &root.descriptors)?;
                self.domains.insert(root.domain, domain);
                Ok(())
            }
        }
    }
}

impl Node {
    /// Adds `descriptors` below this node; `parent` is the path to it, ending in `.`.
    fn load(&mut self, parent: &str, descriptors: &[YamlDescriptor]) -> Result<(), String> {
        for d in descriptors {
            if d.key.is_empty() {
                return Err("descriptor has empty key".into());
            }
            let final_key = match d.value.is_empty() {
                true => d.key.clone(),
                false => format!("{}_{}", d.key, d.value),
            };
            let path = format!("{parent}{final_key}");
            if self.children.contains_key(&final_key) {
                return Err(format!("duplicate descriptor composite key '{path}'"));
            }
            let limit = match &d.rate_limit {
                Some(r) => Some(Arc::new(compile(r, d, &path)?)),
                None => None,
            };
            let wildcard = final_key.contains('*');
            if d.share_threshold && !wildcard {
                return Err(format!(
                    "share_threshold can only be used with wildcard values (containing '*'), \
                     but found key '{final_key}'"
                ));
            }
            if wildcard {
                self.wildcards.push(Wildcard {
                    key: final_key.clone(),
                    parts: final_key.split('*').map(str::to_owned).collect(),
                });
            }
            let mut child = Node {
                limit,
                value_to_metric: d.value_to_metric,
                share_threshold: d.share_threshold,
                ..Node::default()
            };
            child.load(&format!("{path}."), &d.descriptors)?;
            self.children.insert(final_key, child);
        }
        Ok(())
    }

    fn dump(&self, lines: &mut Vec<String>) {
        if let Some(l) = &self.limit {
            let mut line = format!(
                "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                l.full_key,
                l.unit.as_str_name(),
                l.requests_per_unit,
                l.shadow_mode,
                l.quota_mode
            );
            if l.unlimited {
                line.push_str(", unlimited: true");
            }
            if let Some(p) = l.policy.as_ref() {
                if p.algorithm() != Algorithm::FixedWindow {
                    let _ = write!(line, ", algorithm: {}", p.algorithm());
                }
            }
            line.push('\n');
            lines.push(line);
        }
        for child in self.children.values() {
            child.dump(lines);
        }
    }
}

/// A `rate_limit` block checked as the reference checks it, then tollgate's extensions.
fn compile(r: &YamlRateLimit, d: &YamlDescriptor, path: &str) -> Result<Limit, String> {
    let unit = parse_unit(&r.unit);
    if r.unlimited && unit.is_some() {
        return Err("should not specify rate limit unit when unlimited".into());
    }
    if !r.unlimited && unit.is_none() {
        return Err(format!("invalid rate limit unit '{}'", r.unit));
    }
    for replaced in &r.replaces {
        if replaced.is_empty() {
            return Err("should not have an empty replaces entry".into());
        }
        if *replaced == r.name {
            return Err("replaces should not contain name of same descriptor".into());
        }
    }
    let unit = unit.unwrap_or(Unit::Unknown);
    let policy = match unit {
        Unit::Unknown => None,
        _ if r.requests_per_unit == 0 => None,
        unit => Some(policy(r, unit).map_err(|e| format!("descriptor '{path}': {e}"))?),
    };
    Ok(Limit {
        full_key: path.to_owned(),
        requests_per_unit: r.requests_per_unit,
        unit,
        name: r.name.clone(),
        replaces: r.replaces.clone(),
        unlimited: r.unlimited,
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        policy,
        metadata: d.metadata.clone(),
        counters: Counters::default(),
    })
}

/// The tollgate policy of a limit: fixed window unless the file names an algorithm.
fn policy(r: &YamlRateLimit, unit: Unit) -> Result<Policy, ConfigError> {
    let multiplier = r.unit_multiplier.unwrap_or(1);
    if multiplier == 0 {
        return Err(ConfigError::new("unit_multiplier must be at least 1"));
    }
    let period = Duration::from_secs(unit_seconds(unit).saturating_mul(u64::from(multiplier)));
    let algorithm = match &r.algorithm {
        Some(name) => name.parse::<Algorithm>()?,
        None => Algorithm::FixedWindow,
    };
    // Any `u32` per any unit, as the reference takes it (`RequestsPerUnit uint32` in its
    // config_impl.go): a fixed window counts it exactly; see `Quota::any_rate` for the rest.
    let quota = Quota::any_rate(r.requests_per_unit, period, r.burst)?;
    let policy = Policy::new(policy_name(period), quota, algorithm)?;
    match &r.lease {
        Some(lease) => policy.with_lease(lease.parse::<Lease>()?),
        None => Ok(policy),
    }
}

/// The policy name (part of every store key): the window's length, so that a limit whose
/// window changes starts afresh, as the reference's keys (which carry the window) do.
pub(crate) fn policy_name(period: Duration) -> String {
    format!("rls.{}s", period.as_secs())
}

/// The reference's unit names, in any case: second to year.
pub(crate) fn parse_unit(name: &str) -> Option<Unit> {
    Unit::from_str_name(&name.to_ascii_uppercase()).filter(|u| *u != Unit::Unknown)
}

/// A unit's length in seconds, as the reference counts them (a month is 30 days).
pub(crate) fn unit_seconds(unit: Unit) -> u64 {
    const DAY: u64 = 24 * 60 * 60;
    match unit {
        Unit::Unknown => 0,
        Unit::Second => 1,
        Unit::Minute => 60,
        Unit::Hour => 60 * 60,
        Unit::Day => DAY,
        Unit::Week => 7 * DAY,
        Unit::Month => 30 * DAY,
        Unit::Year => 365 * DAY,
    }
}
