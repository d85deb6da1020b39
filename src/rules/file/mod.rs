//! The rules file: rules and skips in TOML, checked whole before they replace anything.
//!
//! ```toml
//! [defaults]                      # optional; any rule may override each field
//! algorithm = "gcra"              # gcra, token_bucket, leaky_bucket, fixed_window, ...
//! key = "header:x-api-key or ip"  # ip | client_ip | header:NAME | path | method | global
//!
//! [[skip]]                        # never limited
//! path = "/health"
//!
//! [[rule]]
//! name = "login"
//! methods = ["POST"]
//! path = "/login"
//! quota = "5/min"
//! key = "ip"
//!
//! [[rule]]
//! name = "export"
//! path = "/export"
//! quota = "2/s"
//! mode = "delay"                  # enforce | shadow | delay
//! max_delay = "2s"                # delay mode only
//!
//! [[rule]]
//! name = "signin"
//! path = "/signin"
//! quota = "5/min"
//! block_for = "15m"               # once denied, denied for 15 minutes
//!
//! [[rule]]
//! name = "global"
//! quota = "20000/s"
//! key = "global"
//! lease = "auto"                  # or a number of tokens: hot keys, see Lease
//!
//! [[rule]]
//! name = "tokens"                 # a budget of tokens, counted once each answer tells them
//! quota = "10000/min"
//! response_cost = { header = "x-usage-tokens", estimate_header = "x-estimated-tokens", estimate = 100 }
//!
//! [[rule]]
//! name = "inference"
//! path = "/v1/*"
//! in_flight = 4                   # at most 4 requests of one client at once, no quota
//! in_flight_ttl = "30s"           # how long a crashed instance's slots stay taken
//! ```
//!
//! Fields of `[defaults]` and of a rule: `algorithm`, `key`, `quota`, `cost_header`,
//! `max_cost`, `mode`, `max_delay`, `block_for` (not in delay mode), `lease`, `trusted_proxies` (networks whose forwarding headers
//! `client_ip` believes), `quota_from` (the name of a quota lookup registered with the layer's
//! builder: each client's quota is looked up at run time) and `overridable` (whether quotas
//! set for clients at run time apply; true with `quota_from`). A rule also has `name`
//! (required), `methods`, `path` and `count_status` (`[401, 403]`, `"4xx"`, `"5xx"`, or a list
//! mixing codes and classes), or instead of a quota `in_flight` (a limit on requests in
//! flight, with `in_flight_ttl`, which `[defaults]` may set too; the rate settings `quota`,
//! `algorithm`, `cost_header`, `max_cost`, `block_for`, `count_status`, `lease`, `quota_from`
//! and `overridable` are refused on such a rule, and those of `[defaults]` do not apply to
//! it); a skip has
//! `path`, `methods`, `keys` (client keys as `[defaults] key` reads them) and `cidrs` (the
//! peer's networks, or the client's when `[defaults] key` reads `client_ip`), at least one of
//! `path`, `keys` and `cidrs`, and takes a request when all it sets hold. A `max_delay` or
//! `trusted_proxies` from `[defaults]` applies only to the rules that use it (delay mode, a
//! `client_ip` key). On a rule, `trusted_proxies` without a `client_ip` key is an error; `max_delay` outside delay mode is ignored, so a rule
//! switches modes by its `mode` line alone.
//!
//! Every value is read by its type while the file is deserialized, so toml reports where a bad
//! one is. Every error starts with `origin:line:column:` and names the rule and field, because a
//! file is edited by people while the service runs and a reload that fails must say where.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use serde::Deserialize;
use toml::de::DeTable;
use toml::Spanned;

use super::{CompiledSkip, Mode, NamedLookups, Route, Rule, Setting};
use crate::algorithm::Algorithm;
use crate::error::ConfigError;
use crate::key::{self, KeyExtractor};
use crate::quota::Quota;

mod limit;
mod report;
mod response_cost;
#[cfg(test)]
mod tests;
mod value;

use limit::{client_quotas, rate_of, refuse_rate_settings};
use report::{Scope, Source};
use value::{
    Cidr, Header, InFlightMax, KeySpec, LeaseSetting, MaxCost, MaxDelay, Method, StatusList, Text,
};

/// What a rules file says.
#[derive(Debug, Clone)]
pub(crate) struct RulesFile {
    /// The rules, in file order, each with its algorithm and key set.
    pub(crate) rules: Vec<Rule>,
    /// Requests never limited.
    pub(crate) skips: Vec<CompiledSkip>,
}

/// Parses and fully validates a rules file; `origin` (the path) starts every error message.
///
/// Each rule is checked as the layer will compile it, with the position of the offending
/// value, so a broken file never gets as far as replacing working rules.
///
/// `lookups` are the quota lookups a rule's `quota_from` may name.
pub(crate) fn parse(
    text: &str,
    origin: &str,
    lookups: &NamedLookups,
) -> Result<RulesFile, ConfigError> {
    let src = Source { text, origin };
    // Syntax first, so a syntax error keeps toml's own message rather than a shape complaint.
    // toml reports the span of any error; the path of one in the document's shape says the
    // table and field.
    let table = DeTable::parse(text).map_err(|e| src.syntax_error(&e))?;
    let doc: FileDoc = serde_path_to_error::deserialize(toml::Deserializer::from(table))
        .map_err(|e| src.shape_error(&e))?;
    let defaults = doc.defaults.map(Spanned::into_inner).unwrap_or_default();
    let skips = (doc.skip.into_iter().enumerate())
        .map(|(i, skip)| build_skip(&src, i + 1, skip, &defaults))
        .collect::<Result<_, _>>()?;
    let mut names = HashMap::with_capacity(doc.rule.len());
    let rules = (doc.rule.into_iter().enumerate())
        .map(|(i, rule)| build_rule(&src, i + 1, rule, &defaults, &mut names, lookups))
        .collect::<Result<_, _>>()?;
    Ok(RulesFile { rules, skips })
}

/// The file as written. Every field is optional so a missing one gets our message (with the
/// table's position), not serde's; the values that later checks point at are `Spanned`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    defaults: Option<Spanned<Settings>>,
    #[serde(default)]
    skip: Vec<Spanned<SkipDoc>>,
    #[serde(default)]
    rule: Vec<Spanned<RuleDoc>>,
}

type List<T> = Spanned<Vec<Text<T>>>;

/// `[defaults]`: the settings a rule may leave out.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    algorithm: Option<Spanned<Text<Algorithm>>>,
    key: Option<Text<KeySpec>>,
    quota: Option<Spanned<Text<Quota>>>,
    cost_header: Option<Text<Header>>,
    max_cost: Option<MaxCost>,
    mode: Option<Spanned<Text<Mode>>>,
    max_delay: Option<Text<MaxDelay>>,
    trusted_proxies: Option<List<Cidr>>,
    block_for: Option<Spanned<Text<MaxDelay>>>,
    lease: Option<Spanned<LeaseSetting>>,
    quota_from: Option<Spanned<String>>,
    overridable: Option<bool>,
    in_flight_ttl: Option<Spanned<Text<MaxDelay>>>,
}

/// A `[[rule]]`: the settings written out again, because serde's `flatten` ignores
/// `deny_unknown_fields`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDoc {
    name: Option<Spanned<String>>,
    methods: Option<List<Method>>,
    path: Option<Spanned<String>>,
    algorithm: Option<Spanned<Text<Algorithm>>>,
    key: Option<Text<KeySpec>>,
    quota: Option<Spanned<Text<Quota>>>,
    cost_header: Option<Text<Header>>,
    max_cost: Option<MaxCost>,
    mode: Option<Spanned<Text<Mode>>>,
    max_delay: Option<Text<MaxDelay>>,
    trusted_proxies: Option<List<Cidr>>,
    block_for: Option<Spanned<Text<MaxDelay>>>,
    /// Only responses with these statuses are counted: a rule's own, never a default.
    count_status: Option<Spanned<StatusList>>,
    lease: Option<Spanned<LeaseSetting>>,
    quota_from: Option<Spanned<String>>,
    overridable: Option<bool>,
    /// A limit on requests in flight instead of a quota: a rule's own, never a default.
    in_flight: Option<Spanned<InFlightMax>>,
    in_flight_ttl: Option<Spanned<Text<MaxDelay>>>,
    /// A cost known after the response: a rule's own, never a default.
    response_cost: Option<Spanned<response_cost::ResponseCostDoc>>,
}

/// A `[[skip]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkipDoc {
    path: Option<Spanned<String>>,
    methods: Option<List<Method>>,
    /// Client keys (as `[defaults] key` reads them) never limited.
    keys: Option<Spanned<Vec<String>>>,
    /// Networks whose clients are never limited.
    cidrs: Option<List<Cidr>>,
}

/// Builds an error at a span, for a field, with a message.
type Fail<'a> = dyn Fn(Range<usize>, &str, &dyn fmt::Display) -> ConfigError + 'a;

/// The rule's value if it sets one, else the default's.
fn pick<'a, T>(own: &'a Option<T>, default: &'a Option<T>) -> Option<&'a T> {
    own.as_ref().or(default.as_ref())
}

/// Builds one `[[rule]]` over `[defaults]` and checks it, and its name against the rules
/// before it (`names`: name → where it is).
fn build_rule(
    src: &Source<'_>,
    index: usize,
    doc: Spanned<RuleDoc>,
    defaults: &Settings,
    names: &mut HashMap<String, usize>,
    lookups: &NamedLookups,
) -> Result<Rule, ConfigError> {
    let header = doc.span();
    let doc = doc.into_inner();
    let scope = Scope::Rule {
        index,
        name: doc.name.as_ref().map(|n| n.get_ref().clone()),
    };
    let fail = |span: Range<usize>, field: &str, message: &dyn fmt::Display| {
        src.error(span, Some(&scope), Some(field), message)
    };
    // Where the rule's own value is, else its `[[rule]]` header.
    let at = |own: Option<Range<usize>>| own.unwrap_or_else(|| header.clone());

    let Some(name) = &doc.name else {
        return Err(fail(
            header,
            "name",
            &"missing: every [[rule]] needs a name, e.g. name = \"api\"",
        ));
    };
    if let Some(first) = names.insert(name.get_ref().clone(), name.span().start) {
        return Err(fail(
            name.span(),
            "name",
            &format!(
                "duplicate rule name {:?} (also used at line {}); rule names must be unique \
                 because they name store keys",
                name.get_ref(),
                src.line(first)
            ),
        ));
    }
    let in_flight = doc.in_flight.as_ref().map(|max| max.get_ref().0);
    // A limit on requests in flight, or a rate (and its quota).
    let limit = match in_flight {
        Some(max) => {
            refuse_rate_settings(&doc, &fail)?;
            Err(max)
        }
        None => Ok(rate_of(&doc, defaults, header.clone(), &fail)?),
    };
    let algorithm =
        pick(&doc.algorithm, &defaults.algorithm).map_or(Algorithm::Gcra, |a| a.get_ref().0);
    let mode = pick(&doc.mode, &defaults.mode).map_or(Mode::Enforce, |m| m.get_ref().0);
    let key = pick(&doc.key, &defaults.key).map_or_else(KeySpec::peer_ip, |k| k.0.clone());
    if let Some(proxies) = &doc.trusted_proxies {
        if !key.uses_client_ip() {
            return Err(fail(
                proxies.span(),
                "trusted_proxies",
                &"trusted_proxies applies only to key \"client_ip\", which this rule does not use",
            ));
        }
    }
    let proxies: Vec<_> = pick(&doc.trusted_proxies, &defaults.trusted_proxies)
        .map(|list| list.get_ref().iter().map(|c| c.0 .0).collect())
        .unwrap_or_default();

    let mut rule = match limit {
        Ok(quota) => Rule::new(name.get_ref().as_str(), quota).algorithm(algorithm),
        Err(max) => {
            let rule = Rule::in_flight(name.get_ref().as_str(), max);
            match pick(&doc.in_flight_ttl, &defaults.in_flight_ttl) {
                Some(ttl) => rule.in_flight_ttl(ttl.get_ref().0 .0),
                None => rule,
            }
        }
    };
    rule = rule
        .key(key.extractor(&proxies))
        .methods(method_list(doc.methods.as_ref(), &fail)?)
        .mode(mode);
    if let Some(path) = &doc.path {
        rule = rule.path(path.get_ref().as_str());
    }
    if in_flight.is_none() {
        if let Some(header) = pick(&doc.cost_header, &defaults.cost_header) {
            rule = rule.cost_header(header.0 .0.as_str());
        }
        if let Some(max) = pick(&doc.max_cost, &defaults.max_cost) {
            rule = rule.max_cost(max.0);
        }
        if let Some(statuses) = &doc.count_status {
            rule = rule.count_status(statuses.get_ref().0.iter().copied());
        }
        if let Some(priced) = &doc.response_cost {
            rule = rule.cost_from_response(priced.get_ref().cost());
        }
        if let Some(ttl) = &doc.in_flight_ttl {
            return Err(fail(
                ttl.span(),
                "in_flight_ttl",
                &"in_flight_ttl applies only to a limit on requests in flight: set in_flight, \
                  or remove in_flight_ttl",
            ));
        }
    }
    // Outside delay mode max_delay is ignored, so a rule switches modes by its mode alone.
    if let (Mode::Delay, Some(delay)) = (mode, pick(&doc.max_delay, &defaults.max_delay)) {
        rule = rule.max_delay(delay.0 .0);
    }
    let block_for = pick(&doc.block_for, &defaults.block_for).filter(|_| in_flight.is_none());
    if let Some(block_for) = block_for {
        rule = rule.block_for(block_for.get_ref().0 .0);
    }

    if let Some(lease) = pick(&doc.lease, &defaults.lease).filter(|_| in_flight.is_none()) {
        rule = rule.lease(lease.get_ref().0);
    }
    if in_flight.is_none() {
        rule = client_quotas(rule, &doc, defaults, lookups, &fail)?;
    }

    // The rule sets its own key and algorithm, so the defaults given here never apply.
    let unused_key: Arc<dyn KeyExtractor> = Arc::new(key::Global);
    rule.check(&unused_key, algorithm).map_err(|(setting, e)| {
        let (span, field) = match setting {
            Setting::Name => (name.span(), "name"),
            Setting::Path => (at(doc.path.as_ref().map(Spanned::span)), "path"),
            Setting::Mode => (at(doc.mode.as_ref().map(Spanned::span)), "mode"),
            // The quota with the algorithm: point at whichever the rule itself sets.
            Setting::Quota => match (&doc.quota, &doc.algorithm) {
                (None, Some(a)) => (a.span(), "algorithm"),
                (q, _) => (at(q.as_ref().map(Spanned::span)), "quota"),
            },
            // Checked as they were read.
            Setting::CostHeader => (header.clone(), "cost_header"),
            Setting::MaxCost => (header.clone(), "max_cost"),
            Setting::BlockFor => (at(block_for.map(Spanned::span)), "block_for"),
            // Read entry by entry; what is left is the list as a whole (empty, delay mode).
            Setting::CountStatus => (
                at(doc.count_status.as_ref().map(Spanned::span)),
                "count_status",
            ),
            Setting::Lease => (at(doc.lease.as_ref().map(Spanned::span)), "lease"),
            Setting::InFlight => (at(doc.in_flight.as_ref().map(Spanned::span)), "in_flight"),
            Setting::ResponseCost => (
                at(doc.response_cost.as_ref().map(Spanned::span)),
                "response_cost",
            ),
            Setting::InFlightTtl => {
                let own = doc
                    .in_flight_ttl
                    .as_ref()
                    .or(defaults.in_flight_ttl.as_ref());
                (at(own.map(Spanned::span)), "in_flight_ttl")
            }
        };
        fail(span, field, &e)
    })?;
    Ok(rule)
}

/// Checks one `[[skip]]` and builds it: its route (any path when it has `keys` or `cidrs`
/// and no `path`), its keys read by `[defaults] key`, and its networks matched against the
/// peer's address, or the client's through `[defaults] trusted_proxies` when `[defaults] key`
/// reads `client_ip`.
fn build_skip(
    src: &Source<'_>,
    index: usize,
    doc: Spanned<SkipDoc>,
    defaults: &Settings,
) -> Result<CompiledSkip, ConfigError> {
    let header = doc.span();
    let doc = doc.into_inner();
    let scope = Scope::Skip(index);
    let fail = |span: Range<usize>, field: &str, message: &dyn fmt::Display| {
        src.error(span, Some(&scope), Some(field), message)
    };
    let methods = method_list(doc.methods.as_ref(), &fail)?;
    if doc.path.is_none() && doc.keys.is_none() && doc.cidrs.is_none() {
        return Err(fail(
            header,
            "path",
            &"missing: every [[skip]] needs a path, keys or cidrs, e.g. path = \"/health\"",
        ));
    }
    let path = doc.path.as_ref().map(|p| p.get_ref().as_str());
    let route = Route::new(methods, path).map_err(|e| {
        let span = doc.path.as_ref().map_or(header.clone(), Spanned::span);
        fail(span, "path", &e)
    })?;
    let mut skip = CompiledSkip::route(route);
    let key = defaults
        .key
        .as_ref()
        .map_or_else(KeySpec::peer_ip, |k| k.0.clone());
    let proxies: Vec<_> = (defaults.trusted_proxies.as_ref())
        .map(|list| list.get_ref().iter().map(|c| c.0 .0).collect())
        .unwrap_or_default();
    if let Some(keys) = doc.keys {
        if keys.get_ref().iter().any(String::is_empty) || keys.get_ref().is_empty() {
            return Err(fail(
                keys.span(),
                "keys",
                &"an empty list or an empty key: list the client keys never limited, e.g. \
                  keys = [\"internal-batch\"]",
            ));
        }
        skip = skip.keys(
            key.extractor(&proxies),
            keys.into_inner().into_iter().collect(),
        );
    }
    if let Some(cidrs) = doc.cidrs {
        if cidrs.get_ref().is_empty() {
            return Err(fail(
                cidrs.span(),
                "cidrs",
                &"empty list: list the networks never limited, e.g. cidrs = [\"10.0.0.0/8\"]",
            ));
        }
        let client_ip = key
            .uses_client_ip()
            .then(|| crate::key::ClientIp::trusting(proxies.iter().copied()));
        skip = skip.cidrs(client_ip, cidrs.get_ref().iter().map(|c| c.0 .0).collect());
    }
    Ok(skip)
}

/// The methods of `methods = [...]`. Absent means any method; an empty list is refused
/// because it reads as "no method" but would mean "every method".
fn method_list(
    list: Option<&List<Method>>,
    fail: &Fail<'_>,
) -> Result<Vec<http::Method>, ConfigError> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    if list.get_ref().is_empty() {
        return Err(fail(
            list.span(),
            "methods",
            &"empty list: leave methods out to match every method",
        ));
    }
    Ok(list.get_ref().iter().map(|m| m.0 .0.clone()).collect())
}
