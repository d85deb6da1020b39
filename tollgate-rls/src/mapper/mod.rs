//! The Prometheus sink's mapping of statsd names to series, as the reference's sink maps them
//! (`src/stats/prom/prometheus_sink.go`: prometheus/statsd_exporter's mapper, with its
//! `default_mapper.yaml`, or the file `PROMETHEUS_MAPPER_YAML` names). The server's series are
//! named as the default mapping names them; with another mapping (a file, or the default
//! without its `scale` under `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`), `recorder.rs` renames
//! each series once, when it is registered, and scales the response time.
//!
//! Taken from a mapping file: `mappings` with `match` (a glob, `*` standing for one name part,
//! or with `match_type: regex` a regular expression), `name` and `labels` (`$1`… are the
//! match's groups), `action: drop`, `match_metric_type`, `scale`, and for the timer
//! `timer_type`/`observer_type` (`histogram` with `buckets` or `histogram_options.buckets`,
//! else a summary), with `defaults` for the last ones. Globs are tried before regular
//! expressions, each in the file's order, as statsd_exporter tries them.

mod recorder;

use std::collections::BTreeMap;

use regex::Regex;
use serde::Deserialize;

use crate::statsd::StatKind;

pub(crate) use recorder::MappedRecorder;

/// The reference's default mapping.
pub(crate) const DEFAULT_MAPPING: &str = include_str!("default_mapper.yaml");

/// Prometheus's default buckets (client_golang's `DefBuckets`), which statsd_exporter gives a
/// histogram without buckets of its own.
pub(crate) const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The default mapping as the reference reads it with `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`:
/// without the response time's `scale` (its `mapperConfig`), so the values are milliseconds.
pub(crate) fn default_mapping_in_milliseconds() -> String {
    DEFAULT_MAPPING.replacen("    scale: 0.001\n", "", 1)
}

/// A mapping file, as statsd_exporter reads it (fields it has and this does not use are
/// accepted and left alone).
#[derive(Debug, Default, Deserialize)]
struct MappingFile {
    #[serde(default)]
    defaults: Observer,
    #[serde(default)]
    mappings: Vec<RuleFile>,
}

/// How a timer is observed.
#[derive(Debug, Default, Clone, Deserialize)]
struct Observer {
    timer_type: Option<String>,
    observer_type: Option<String>,
    buckets: Option<Vec<f64>>,
    histogram_options: Option<HistogramOptions>,
    match_type: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct HistogramOptions {
    buckets: Option<Vec<f64>>,
}

/// One mapping as written.
#[derive(Debug, Deserialize)]
struct RuleFile {
    #[serde(rename = "match")]
    pattern: String,
    name: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    action: Option<String>,
    match_metric_type: Option<String>,
    scale: Option<f64>,
    #[serde(flatten)]
    observer: Observer,
}

/// One mapping, compiled.
#[derive(Debug)]
struct Rule {
    regex: Regex,
    glob: bool,
    name: String,
    labels: Vec<(String, String)>,
    drop: bool,
    metric_type: Option<String>,
    scale: f64,
    /// For a timer: its buckets when it is a histogram, `None` for a summary.
    buckets: Option<Vec<f64>>,
}

/// The mapping in force.
#[derive(Debug)]
pub(crate) struct Mapper {
    rules: Vec<Rule>,
}

/// What a statistic becomes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Mapped {
    /// `action: drop`: not exported.
    Drop,
    /// A series of this name and labels; a timer's values (milliseconds) are multiplied by
    /// `scale`, and kept in `buckets` (`None`: a summary).
    Series {
        name: String,
        labels: Vec<(String, String)>,
        scale: f64,
        buckets: Option<Vec<f64>>,
    },
}

impl Mapper {
    /// The mapping in `yaml`; an error says what is wrong with it.
    pub(crate) fn from_yaml(yaml: &str) -> Result<Self, String> {
        let file: MappingFile = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        let rules = (file.mappings.into_iter())
            .map(|rule| compile(rule, &file.defaults))
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// What the statsd statistic `statsd` (a `kind`) becomes: the first glob that matches it,
    /// else the first regular expression, else its name made a Prometheus name, unlabelled
    /// (statsd_exporter's `EscapeMetricName`).
    pub(crate) fn map(&self, statsd: &str, kind: StatKind) -> Mapped {
        let type_name = match kind {
            StatKind::Counter => "counter",
            StatKind::Gauge => "gauge",
            StatKind::Timer => "observer",
        };
        let fits = |rule: &&Rule| match rule.metric_type.as_deref() {
            None => true,
            Some("timer" | "histogram" | "summary" | "distribution") => type_name == "observer",
            Some(wanted) => wanted == type_name,
        };
        let globs = self.rules.iter().filter(|r| r.glob);
        let regexes = self.rules.iter().filter(|r| !r.glob);
        for rule in globs.chain(regexes).filter(fits) {
            let Some(captures) = rule.regex.captures(statsd) else {
                continue;
            };
            if rule.drop {
                return Mapped::Drop;
            }
            let expand = |template: &str| {
                let mut out = String::new();
                captures.expand(template, &mut out);
                out
            };
            let labels = (rule.labels.iter())
                .map(|(k, v)| (k.clone(), expand(v)))
                .collect();
            return Mapped::Series {
                name: expand(&rule.name),
                labels,
                scale: rule.scale,
                buckets: rule.buckets.clone().filter(|_| kind == StatKind::Timer),
            };
        }
        Mapped::Series {
            name: escape(statsd),
            labels: Vec::new(),
            scale: 1.0,
            buckets: None,
        }
    }
}

/// One written mapping, checked and compiled, with `defaults` for what it leaves out.
fn compile(rule: RuleFile, defaults: &Observer) -> Result<Rule, String> {
    let match_type = (rule.observer.match_type.as_deref())
        .or(defaults.match_type.as_deref())
        .unwrap_or("glob");
    let (source, glob) = match match_type {
        "glob" => (glob_regex(&rule.pattern), true),
        "regex" => (rule.pattern.clone(), false),
        other => return Err(format!("match_type {other:?}: expected glob or regex")),
    };
    let regex = Regex::new(&source).map_err(|e| format!("match {:?}: {e}", rule.pattern))?;
    let drop = match rule.action.as_deref() {
        None | Some("map") => false,
        Some("drop") => true,
        Some(other) => return Err(format!("action {other:?}: expected map or drop")),
    };
    let name = rule.name.unwrap_or_default();
    if name.is_empty() && !drop {
        return Err(format!("the mapping of {:?} has no name", rule.pattern));
    }
    let observer = |pick: fn(&Observer) -> Option<String>| pick(&rule.observer).or(pick(defaults));
    let observer_type = observer(|o| o.observer_type.clone().or(o.timer_type.clone()));
    let buckets = match observer_type.as_deref() {
        Some("histogram") => Some(
            (rule.observer.histogram_options.as_ref())
                .and_then(|h| h.buckets.clone())
                .or(rule.observer.buckets.clone())
                .or(defaults
                    .histogram_options
                    .as_ref()
                    .and_then(|h| h.buckets.clone()))
                .or(defaults.buckets.clone())
                .unwrap_or_else(|| DEFAULT_BUCKETS.to_vec()),
        ),
        None | Some("" | "summary" | "default") => None,
        Some(other) => {
            return Err(format!(
                "timer_type {other:?}: expected histogram or summary"
            ))
        }
    };
    Ok(Rule {
        regex,
        glob,
        name,
        labels: rule.labels.into_iter().collect(),
        drop,
        metric_type: rule.match_metric_type,
        scale: rule.scale.unwrap_or(1.0),
        buckets,
    })
}

/// A glob as an anchored regular expression: `*` is a group of characters other than `.`.
fn glob_regex(glob: &str) -> String {
    let mut out = String::from("^");
    for (i, part) in glob.split('*').enumerate() {
        if i > 0 {
            out.push_str("([^.]*)");
        }
        out.push_str(&regex::escape(part));
    }
    out.push('$');
    out
}

/// statsd_exporter's `EscapeMetricName`: every character other than a letter, a digit or `_`
/// becomes `_`, and a name that starts with a digit gets a `_` first.
fn escape(statsd: &str) -> String {
    let mut out = String::with_capacity(statsd.len() + 1);
    if statsd.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(
        statsd
            .chars()
            .map(|c| match c.is_ascii_alphanumeric() || c == '_' {
                true => c,
                false => '_',
            }),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, labels: &[(&str, &str)], scale: f64, buckets: Option<&[f64]>) -> Mapped {
        Mapped::Series {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            scale,
            buckets: buckets.map(<[f64]>::to_vec),
        }
    }

    /// The reference's `default_mapper.yaml` maps its statistics to the names tollgate-rls
    /// serves; the response time is a histogram of Prometheus's default buckets, in seconds
    /// (`scale: 0.001`), or in milliseconds without the scale.
    #[test]
    fn the_references_default_mapping() {
        let mapper = Mapper::from_yaml(DEFAULT_MAPPING).unwrap();
        assert_eq!(
            mapper.map(
                "ratelimit.service.rate_limit.edge.user_a.total_hits",
                StatKind::Counter
            ),
            series(
                "ratelimit_service_rate_limit_total_hits",
                &[("domain", "edge"), ("key1", "user_a")],
                1.0,
                None
            )
        );
        assert_eq!(
            mapper.map(
                "ratelimit.service.rate_limit.edge.a.b.over_limit",
                StatKind::Counter
            ),
            series(
                "ratelimit_service_rate_limit_over_limit",
                &[("domain", "edge"), ("key1", "a"), ("key2", "b")],
                1.0,
                None
            )
        );
        let time = "ratelimit_server.ShouldRateLimit.response_time";
        assert_eq!(
            mapper.map(time, StatKind::Timer),
            series(
                "ratelimit_service_response_time_seconds",
                &[("grpc_method", "ShouldRateLimit")],
                0.001,
                Some(&DEFAULT_BUCKETS)
            )
        );
        // Not mapped: the name escaped, as statsd_exporter escapes it.
        assert_eq!(
            mapper.map("ratelimit.redis_pool.cx_active", StatKind::Gauge),
            series("ratelimit_redis_pool_cx_active", &[], 1.0, None)
        );
        let milliseconds = Mapper::from_yaml(&default_mapping_in_milliseconds()).unwrap();
        let Mapped::Series { scale, .. } = milliseconds.map(time, StatKind::Timer) else {
            panic!("dropped");
        };
        assert_eq!(scale, 1.0);
    }

    #[test]
    fn a_mapping_of_ones_own() {
        let yaml = r#"
defaults:
  timer_type: histogram
  buckets: [1, 10, 100]
mappings:
  - match: "ratelimit_server.*.response_time"
    name: "rls_latency_ms"
    labels: { method: "$1" }
  - match: "ratelimit\\.service\\.rate_limit\\.([^.]*)\\..*\\.total_hits"
    match_type: regex
    name: "hits_${1}"
  - match: "ratelimit.service.config_load_*"
    action: drop
"#;
        let mapper = Mapper::from_yaml(yaml).unwrap();
        let time = "ratelimit_server.ShouldRateLimit.response_time";
        assert_eq!(
            mapper.map(time, StatKind::Timer),
            series(
                "rls_latency_ms",
                &[("method", "ShouldRateLimit")],
                1.0,
                Some(&[1.0, 10.0, 100.0])
            )
        );
        let hits = mapper.map(
            "ratelimit.service.rate_limit.edge.a.total_hits",
            StatKind::Counter,
        );
        assert_eq!(hits, series("hits_edge", &[], 1.0, None));
        let dropped = mapper.map("ratelimit.service.config_load_success", StatKind::Counter);
        assert_eq!(dropped, Mapped::Drop);
        assert!(Mapper::from_yaml("mappings: [{match: a.*}]").is_err());
        assert!(Mapper::from_yaml("mappings: [{match: '(', match_type: regex, name: x}]").is_err());
    }
}
