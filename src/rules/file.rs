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
//! ```
//!
//! Fields of `[defaults]` and of a rule: `algorithm`, `key`, `quota`, `cost_header`,
//! `max_cost`, `mode`, `max_delay`, `trusted_proxies` (networks whose forwarding headers
//! `client_ip` believes). A rule also has `name` (required), `methods` and `path`; a skip has
//! `path` (required) and `methods`. A `max_delay` or `trusted_proxies` from `[defaults]` applies
//! only to the rules that use it (delay mode, a `client_ip` key); set on a rule that does not,
//! it is an error.
//!
//! Every error starts with `origin:line:column:` and names the rule and field, because a file
//! is edited by people while the service runs and a reload that fails must say where.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use ipnet::IpNet;
use serde::Deserialize;
use toml::Spanned;

use super::{parse_methods, Mode, Route, Rule};
use crate::algorithm::Algorithm;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::{self, KeyExtractor};
use crate::quota::{parse_period, Policy, Quota};

/// What a rules file says.
#[derive(Debug, Clone)]
pub(crate) struct RulesFile {
    /// The rules, in file order, each with its algorithm and key set.
    pub(crate) rules: Vec<Rule>,
    /// Routes never limited.
    pub(crate) skips: Vec<Route>,
}

/// Parses and fully validates a rules file; `origin` (the path) starts every error message.
///
/// Everything `Rule::compile` checks is checked here too, with the position of the offending
/// value, so a broken file never gets as far as replacing working rules.
pub(crate) fn parse(source: &str, origin: &str) -> Result<RulesFile, ConfigError> {
    let src = Source {
        text: source,
        origin,
    };
    // Syntax first, so a syntax error keeps toml's own message rather than a shape complaint.
    if let Err(e) = source.parse::<toml::Table>() {
        return Err(src.syntax_error(&e));
    }
    let doc: FileDoc = toml::from_str(source).map_err(|e| src.shape_error(&e))?;

    let defaults = match &doc.defaults {
        Some(d) => parse_settings(d.get_ref(), &|span, field, message| {
            src.error(span, Some(&Scope::Defaults), Some(field), message)
        })?,
        None => Parsed::default(),
    };

    let mut skips = Vec::with_capacity(doc.skip.len());
    for (index, skip) in doc.skip.into_iter().enumerate() {
        skips.push(build_skip(&src, index + 1, skip)?);
    }

    let mut rules = Vec::with_capacity(doc.rule.len());
    let mut seen = BTreeMap::new();
    for (index, rule) in doc.rule.into_iter().enumerate() {
        rules.push(build_rule(&src, index + 1, rule, &defaults, &mut seen)?);
    }
    Ok(RulesFile { rules, skips })
}

/// The file as written. Every value is `Spanned` so errors can point at it; every field is
/// optional so a missing one gets our message (with the table's position), not serde's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    defaults: Option<Spanned<Settings>>,
    #[serde(default)]
    skip: Vec<Spanned<SkipDoc>>,
    #[serde(default)]
    rule: Vec<Spanned<RuleDoc>>,
}

type Text = Spanned<String>;
type TextList = Spanned<Vec<Spanned<String>>>;

/// The fields `[defaults]` and a rule share.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    algorithm: Option<Text>,
    key: Option<Text>,
    quota: Option<Text>,
    cost_header: Option<Text>,
    max_cost: Option<Spanned<i64>>,
    mode: Option<Text>,
    max_delay: Option<Text>,
    trusted_proxies: Option<TextList>,
}

/// A `[[rule]]`: written out flat because serde's `flatten` ignores `deny_unknown_fields`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleDoc {
    name: Option<Text>,
    methods: Option<TextList>,
    path: Option<Text>,
    algorithm: Option<Text>,
    key: Option<Text>,
    quota: Option<Text>,
    cost_header: Option<Text>,
    max_cost: Option<Spanned<i64>>,
    mode: Option<Text>,
    max_delay: Option<Text>,
    trusted_proxies: Option<TextList>,
}

/// A `[[skip]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkipDoc {
    path: Option<Text>,
    methods: Option<TextList>,
}

/// Settings after parsing each value on its own.
#[derive(Default)]
struct Parsed {
    algorithm: Option<Algorithm>,
    key: Option<Vec<KeyPart>>,
    quota: Option<Quota>,
    cost_header: Option<String>,
    max_cost: Option<u32>,
    mode: Option<Mode>,
    max_delay: Option<Duration>,
    trusted_proxies: Option<Vec<IpNet>>,
}

/// Builds an error at a span, for a field, with a message.
type Fail<'a> = dyn Fn(Range<usize>, &str, String) -> ConfigError + 'a;

/// Parses each settings value, pointing errors at the value.
fn parse_settings(s: &Settings, fail: &Fail<'_>) -> Result<Parsed, ConfigError> {
    let algorithm = parse_text(s.algorithm.as_ref(), "algorithm", fail, |v| {
        v.parse::<Algorithm>().map_err(|e| e.to_string())
    })?;
    let quota = parse_text(s.quota.as_ref(), "quota", fail, |v| {
        v.parse::<Quota>().map_err(|e| e.to_string())
    })?;
    let mode = parse_text(s.mode.as_ref(), "mode", fail, |v| {
        v.parse::<Mode>().map_err(|e| e.to_string())
    })?;
    let max_delay = parse_text(s.max_delay.as_ref(), "max_delay", fail, |v| {
        parse_period(v).map_err(|why| {
            format!("invalid duration {v:?}: {why}; write a number and a unit, e.g. \"500ms\" or \"2s\"")
        })
    })?;
    let key = parse_text(s.key.as_ref(), "key", fail, parse_key)?;
    let cost_header = parse_text(s.cost_header.as_ref(), "cost_header", fail, |v| {
        check_header_name(v).map(|()| v.to_owned())
    })?;
    let max_cost = s
        .max_cost
        .as_ref()
        .map(|v| {
            u32::try_from(*v.get_ref())
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| {
                    fail(
                        v.span(),
                        "max_cost",
                        format!(
                            "max_cost {} is out of range (use a whole number from 1 to {})",
                            v.get_ref(),
                            u32::MAX
                        ),
                    )
                })
        })
        .transpose()?;
    let trusted_proxies = s
        .trusted_proxies
        .as_ref()
        .map(|list| {
            list.get_ref()
                .iter()
                .map(|v| parse_cidr(v.get_ref()).map_err(|m| fail(v.span(), "trusted_proxies", m)))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    Ok(Parsed {
        algorithm,
        key,
        quota,
        cost_header,
        max_cost,
        mode,
        max_delay,
        trusted_proxies,
    })
}

/// Parses an optional text value, pointing an error at it.
fn parse_text<T>(
    value: Option<&Text>,
    field: &str,
    fail: &Fail<'_>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, ConfigError> {
    value
        .map(|v| parse(v.get_ref()).map_err(|m| fail(v.span(), field, m)))
        .transpose()
}

/// Checks one `[[rule]]` against itself, `[defaults]` and the rules before it, and builds it.
fn build_rule(
    src: &Source<'_>,
    index: usize,
    doc: Spanned<RuleDoc>,
    defaults: &Parsed,
    seen: &mut BTreeMap<String, usize>,
) -> Result<Rule, ConfigError> {
    let header = doc.span();
    let RuleDoc {
        name,
        methods,
        path,
        algorithm,
        key,
        quota,
        cost_header,
        max_cost,
        mode,
        max_delay,
        trusted_proxies,
    } = doc.into_inner();
    let own = Settings {
        algorithm,
        key,
        quota,
        cost_header,
        max_cost,
        mode,
        max_delay,
        trusted_proxies,
    };
    let scope = Scope::Rule {
        index,
        name: name.as_ref().map(|n| n.get_ref().clone()),
    };
    let fail = |span: Range<usize>, field: &str, message: String| {
        src.error(span, Some(&scope), Some(field), message)
    };
    // Where a value set by the rule is, else the rule's `[[rule]]` header.
    let at = |value: Option<Range<usize>>| value.unwrap_or_else(|| header.clone());

    let Some(name) = name else {
        return Err(fail(
            header.clone(),
            "name",
            "missing: every [[rule]] needs a name, e.g. name = \"api\"".into(),
        ));
    };
    let name_span = name.span();
    let name = name.into_inner();
    Policy::new(name.as_str(), Quota::per_second(1), Algorithm::Gcra)
        .map_err(|e| fail(name_span.clone(), "name", e.to_string()))?;
    let line = src.position(name_span.start).0;
    if let Some(first) = seen.insert(name.clone(), line) {
        return Err(fail(
            name_span,
            "name",
            format!(
                "duplicate rule name {name:?} (also used at line {first}); rule names must be \
                 unique because they name store keys"
            ),
        ));
    }

    let mine = parse_settings(&own, &fail)?;
    let algorithm = mine
        .algorithm
        .or(defaults.algorithm)
        .unwrap_or(Algorithm::Gcra);
    let Some(quota) = mine.quota.or(defaults.quota) else {
        return Err(fail(
            header.clone(),
            "quota",
            "missing: set quota in the rule or in [defaults], e.g. quota = \"100/min\"".into(),
        ));
    };
    let mode = mine.mode.or(defaults.mode).unwrap_or_default();

    let key_parts = mine
        .key
        .or_else(|| defaults.key.clone())
        .unwrap_or_else(|| vec![KeyPart::PeerIp]);
    if let Some(proxies) = &own.trusted_proxies {
        if !key_parts.contains(&KeyPart::ClientIp) {
            return Err(fail(
                proxies.span(),
                "trusted_proxies",
                "trusted_proxies applies only to key \"client_ip\", which this rule does not use"
                    .into(),
            ));
        }
    }
    let proxies = mine
        .trusted_proxies
        .or_else(|| defaults.trusted_proxies.clone())
        .unwrap_or_default();
    let key = build_key(&key_parts, &proxies).ok_or_else(|| {
        fail(
            at(own.key.as_ref().map(Spanned::span)),
            "key",
            "empty key".into(),
        )
    })?;

    let methods = parse_method_list(methods.as_ref(), &fail)?;
    Route::new(methods.clone(), path.as_ref().map(|p| p.get_ref().as_str()))
        .map_err(|e| fail(at(path.as_ref().map(Spanned::span)), "path", e.to_string()))?;

    let max_delay = match (mode, mine.max_delay, &own.max_delay) {
        (Mode::Delay, Some(d), _) => Some(d),
        (Mode::Delay, None, _) => match defaults.max_delay {
            Some(d) => Some(d),
            None => {
                return Err(fail(
                    at(own.mode.as_ref().map(Spanned::span)),
                    "mode",
                    "mode delay needs max_delay, the longest a request may wait (e.g. \
                     max_delay = \"2s\")"
                        .into(),
                ))
            }
        },
        // Outside delay mode max_delay is ignored, so a rule switches modes by its mode
        // line alone (the documented example keeps `max_delay` on an enforce rule).
        (_, _, _) => None,
    };

    // The quota with the algorithm: a burst that the algorithm cannot use, a bucket too long.
    if let Err(e) = Policy::new(name.as_str(), quota, algorithm) {
        let (span, field) = match (&own.quota, &own.algorithm) {
            (Some(q), _) => (q.span(), "quota"),
            (None, Some(a)) => (a.span(), "algorithm"),
            (None, None) => (header.clone(), "quota"),
        };
        return Err(fail(span, field, strip_context(&e, "policy", &name)));
    }

    let mut rule = Rule::new(name.as_str(), quota)
        .algorithm(algorithm)
        .key(key)
        .methods(methods)
        .mode(mode);
    if let Some(path) = path {
        rule = rule.path(path.into_inner());
    }
    if let Some(header) = mine.cost_header.or_else(|| defaults.cost_header.clone()) {
        rule = rule.cost_header(header);
    }
    if let Some(max) = mine.max_cost.or(defaults.max_cost) {
        rule = rule.max_cost(max);
    }
    if let Some(d) = max_delay {
        rule = rule.max_delay(d);
    }

    // Whatever else compiling checks (delay mode with a window algorithm, a queue too long).
    let default_key: Arc<dyn KeyExtractor> = Arc::new(key::PeerIp::default());
    rule.compile(&default_key, Algorithm::Gcra).map_err(|e| {
        let message = strip_context(&e, "rule", &name);
        match (mode, &own.mode) {
            (Mode::Delay, Some(m)) => fail(m.span(), "mode", message),
            (Mode::Delay, None) => fail(header.clone(), "mode", message),
            _ => src.error(header.clone(), Some(&scope), None, message),
        }
    })?;
    Ok(rule)
}

/// Checks one `[[skip]]` and builds its route.
fn build_skip(src: &Source<'_>, index: usize, doc: Spanned<SkipDoc>) -> Result<Route, ConfigError> {
    let header = doc.span();
    let doc = doc.into_inner();
    let scope = Scope::Skip(index);
    let fail = |span: Range<usize>, field: &str, message: String| {
        src.error(span, Some(&scope), Some(field), message)
    };
    let methods = parse_method_list(doc.methods.as_ref(), &fail)?;
    let Some(path) = doc.path else {
        return Err(fail(
            header,
            "path",
            "missing: every [[skip]] needs a path, e.g. path = \"/health\"".into(),
        ));
    };
    Route::new(methods, Some(path.get_ref())).map_err(|e| fail(path.span(), "path", e.to_string()))
}

/// Parses `methods = [...]`, pointing at the bad entry. Absent means any method; an empty list
/// is refused because it reads as "no method" but would mean "every method".
fn parse_method_list(
    list: Option<&TextList>,
    fail: &Fail<'_>,
) -> Result<Vec<http::Method>, ConfigError> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    if list.get_ref().is_empty() {
        return Err(fail(
            list.span(),
            "methods",
            "empty list: leave methods out to match every method".into(),
        ));
    }
    let mut methods = Vec::with_capacity(list.get_ref().len());
    for name in list.get_ref() {
        let parsed = parse_methods([name.get_ref().as_str()]).map_err(|e| {
            fail(
                name.span(),
                "methods",
                format!("{e} (use method names such as GET, POST, PUT, PATCH or DELETE)"),
            )
        })?;
        methods.extend(parsed);
    }
    Ok(methods)
}

/// Drops the `<what> "<name>": ` prefix a lower layer put in front of a message, since the
/// file error already names the rule.
fn strip_context(e: &ConfigError, what: &str, name: &str) -> String {
    let prefix = format!("{what} {name:?}: ");
    e.message()
        .strip_prefix(&prefix)
        .unwrap_or(e.message())
        .to_owned()
}

/// What `key` values are allowed, for error messages.
const KEYS_ALLOWED: &str = "use ip, client_ip, header:NAME, path, method or global, or several \
                            joined by \" or \", e.g. \"header:x-api-key or ip\"";

/// One alternative of a `key` value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyPart {
    PeerIp,
    ClientIp,
    /// A valid header name, lowercase.
    Header(String),
    Path,
    Method,
    Global,
}

/// Parses `"ip"`, `"header:x-api-key or ip"`, ...
fn parse_key(spec: &str) -> Result<Vec<KeyPart>, String> {
    spec.split(" or ")
        .map(|part| match part.trim() {
            "ip" => Ok(KeyPart::PeerIp),
            "client_ip" => Ok(KeyPart::ClientIp),
            "path" => Ok(KeyPart::Path),
            "method" => Ok(KeyPart::Method),
            "global" => Ok(KeyPart::Global),
            other => match other.strip_prefix("header:") {
                Some(name) => {
                    let name = name.trim().to_ascii_lowercase();
                    check_header_name(&name)
                        .map(|()| KeyPart::Header(name))
                        .map_err(|why| format!("key {spec:?}: {why}"))
                }
                None => Err(format!(
                    "unknown key {other:?} in {spec:?} ({KEYS_ALLOWED})"
                )),
            },
        })
        .collect()
}

/// Refuses what `HeaderName` refuses, so a key or cost header can never silently match nothing.
fn check_header_name(name: &str) -> Result<(), String> {
    HeaderName::from_bytes(name.as_bytes())
        .map(|_| ())
        .map_err(|_| {
            format!(
                "invalid header name {name:?} (use letters, digits and '-', e.g. \"x-api-key\")"
            )
        })
}

/// Parses a trusted proxy network; a bare address means just that address.
fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            format!(
                "invalid CIDR {text:?} (use a network such as \"10.0.0.0/8\" or \
                 \"2001:db8::/32\", or a single address)"
            )
        })
}

/// The extractor for a parsed `key`; `None` only for an empty list, which parsing never gives.
fn build_key(parts: &[KeyPart], proxies: &[IpNet]) -> Option<Arc<dyn KeyExtractor>> {
    let one = |part: &KeyPart| -> Arc<dyn KeyExtractor> {
        match part {
            KeyPart::PeerIp => Arc::new(key::PeerIp::default()),
            KeyPart::ClientIp => Arc::new(key::ClientIp::trusting(proxies.iter().copied())),
            KeyPart::Header(name) => Arc::new(key::Header::new(name)),
            KeyPart::Path => Arc::new(key::Path),
            KeyPart::Method => Arc::new(key::Method),
            KeyPart::Global => Arc::new(key::Global),
        }
    };
    let mut built = parts.iter().map(one);
    let first = built.next()?;
    Some(built.fold(first, |chain, next| Arc::new(chain.or(next))))
}

/// The table an error is in, as named in messages.
enum Scope {
    Defaults,
    /// 1-based.
    Skip(usize),
    /// 1-based; the name when the rule has one.
    Rule {
        index: usize,
        name: Option<String>,
    },
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Defaults => f.write_str("defaults"),
            Scope::Skip(index) => write!(f, "skip #{index}"),
            Scope::Rule {
                name: Some(name), ..
            } => write!(f, "rule {name:?}"),
            Scope::Rule { index, name: None } => write!(f, "rule #{index}"),
        }
    }
}

/// The file's text and name, to turn byte spans into `origin:line:column:`.
struct Source<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Source<'_> {
    /// 1-based line and column (in characters, as toml counts) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let bytes = self.text.as_bytes();
        let before = bytes.get(..offset).unwrap_or(bytes);
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let column = before
            .get(line_start..)
            .unwrap_or_default()
            .iter()
            .filter(|&&b| b & 0xC0 != 0x80)
            .count()
            + 1;
        (line, column)
    }

    /// `origin:line:column: scope: field: message`.
    fn error(
        &self,
        span: Range<usize>,
        scope: Option<&Scope>,
        field: Option<&str>,
        message: impl fmt::Display,
    ) -> ConfigError {
        let (line, column) = self.position(span.start);
        let mut text = format!("{}:{line}:{column}: ", self.origin);
        if let Some(scope) = scope {
            text.push_str(&format!("{scope}: "));
        }
        if let Some(field) = field {
            text.push_str(&format!("{field}: "));
        }
        text.push_str(&message.to_string());
        ConfigError::of(ConfigErrorKind::RulesFile, text)
    }

    /// A TOML syntax error: toml's own message, on one line so a failed reload logs as one.
    fn syntax_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = format!("TOML syntax error: {}", one_line(e.message()));
        match e.span() {
            Some(span) => self.error(span, None, None, message),
            None => ConfigError::of(
                ConfigErrorKind::RulesFile,
                format!("{}: {message}", self.origin),
            ),
        }
    }

    /// A shape error from serde (unknown field, wrong type), with the rule or table and the
    /// field it is in when those can be found.
    fn shape_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = one_line(e.message());
        let Some(span) = e.span() else {
            return ConfigError::of(
                ConfigErrorKind::RulesFile,
                format!("{}: {message}", self.origin),
            );
        };
        let (scope, field) = self.locate(span.start);
        self.error(span, scope.as_ref(), field.as_deref(), message)
    }

    /// The table and field around a byte offset, read leniently (unknown fields and any value
    /// type accepted) since the strict reading just failed.
    fn locate(&self, offset: usize) -> (Option<Scope>, Option<String>) {
        let Ok(doc) = toml::from_str::<LaxDoc>(self.text) else {
            return (None, None);
        };
        let field_at = |table: &LaxTable| {
            table
                .iter()
                .find(|(_, v)| v.span().contains(&offset) || v.span().start == offset)
                .map(|(k, _)| k.clone())
        };
        for (i, rule) in doc.rule.iter().enumerate() {
            if extent(rule).contains(&offset) {
                let name = rule
                    .get_ref()
                    .get("name")
                    .and_then(|v| v.get_ref().as_str())
                    .map(str::to_owned);
                let scope = Scope::Rule { index: i + 1, name };
                return (Some(scope), field_at(rule.get_ref()));
            }
        }
        for (i, skip) in doc.skip.iter().enumerate() {
            if extent(skip).contains(&offset) {
                return (Some(Scope::Skip(i + 1)), field_at(skip.get_ref()));
            }
        }
        if let Some(defaults) = &doc.defaults {
            if extent(defaults).contains(&offset) {
                return (Some(Scope::Defaults), field_at(defaults.get_ref()));
            }
        }
        (None, None)
    }
}

/// A message joined onto one line.
fn one_line(message: &str) -> String {
    message.trim().replace('\n', "; ")
}

/// A table with any fields, each value with its span.
type LaxTable = BTreeMap<String, Spanned<toml::Value>>;

/// The file's tables read without checking their fields, to say where an error is.
#[derive(Deserialize)]
struct LaxDoc {
    defaults: Option<Spanned<LaxTable>>,
    #[serde(default)]
    skip: Vec<Spanned<LaxTable>>,
    #[serde(default)]
    rule: Vec<Spanned<LaxTable>>,
}

/// From a table's header (whose span is all toml gives for `[[rule]]`) to the end of its last
/// value: where its keys and values are.
fn extent(table: &Spanned<LaxTable>) -> Range<usize> {
    let header = table.span();
    let values = table.get_ref().values().map(Spanned::span);
    let start = values
        .clone()
        .map(|s| s.start)
        .fold(header.start, usize::min);
    let end = values.map(|s| s.end).fold(header.end, usize::max);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::CompiledRule;
    use http::request::Parts;
    use proptest::prelude::*;

    const EXAMPLE: &str = r#"[defaults]
algorithm = "gcra"              # any of the seven, snake_case
key = "header:x-api-key"        # "ip" | "client_ip" | "header:NAME" | "path" | "method" | "global"

[[skip]]
path = "/health"

[[rule]]
name = "login"
methods = ["POST"]
path = "/login"
quota = "5/min"
key = "ip"                      # overrides the default

[[rule]]
name = "api"
path = "/api/*"
quota = "100/s; burst=200"
cost_header = "x-cost"
mode = "enforce"                # enforce | shadow | delay
max_delay = "2s"                # delay mode only
"#;

    fn parts(method: &str, path: &str) -> Parts {
        http::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn compile(rule: &Rule) -> CompiledRule {
        // A default key and algorithm unlike the file's, to show the file sets its own.
        let other: Arc<dyn KeyExtractor> = Arc::new(key::Global);
        rule.compile(&other, Algorithm::FixedWindow).unwrap()
    }

    /// The error message for `source` read as `rules.toml`.
    fn error(source: &str) -> String {
        parse(source, "rules.toml").unwrap_err().to_string()
    }

    /// Asserts `message` starts with `rules.toml:<at>: ` and contains every part.
    #[track_caller]
    fn assert_error(message: &str, at: &str, parts: &[&str]) {
        let prefix = format!("rules.toml:{at}: ");
        assert!(
            message.starts_with(&prefix),
            "{message:?} should start with {prefix:?}"
        );
        for part in parts {
            assert!(
                message.contains(part),
                "{message:?} should contain {part:?}"
            );
        }
    }

    #[test]
    fn the_example_parses_to_its_rules() {
        let file = parse(EXAMPLE, "rules.toml").unwrap();
        let names: Vec<_> = file.rules.iter().map(Rule::name).collect();
        assert_eq!(names, ["login", "api"]);

        assert_eq!(file.skips.len(), 1);
        assert!(file.skips[0].matches(&parts("GET", "/health")));
        assert!(file.skips[0].matches(&parts("POST", "/health")));
        assert!(!file.skips[0].matches(&parts("GET", "/healthz")));

        let login = compile(&file.rules[0]);
        assert!(login.route.matches(&parts("POST", "/login")));
        assert!(!login.route.matches(&parts("GET", "/login")));
        assert_eq!(login.quota, Quota::per_minute(5));
        assert_eq!(login.policy.algorithm(), Algorithm::Gcra);
        assert_eq!(login.key.describe(), key::PeerIp::default().describe());
        assert_eq!(login.shape.mode, Mode::Enforce);

        let api = compile(&file.rules[1]);
        assert!(api.route.matches(&parts("GET", "/api/items")));
        assert!(api.route.matches(&parts("DELETE", "/api")));
        assert!(!api.route.matches(&parts("GET", "/apix")));
        assert_eq!(api.quota, Quota::per_second(100).burst(200));
        assert_eq!(api.key.describe(), "the x-api-key header");
        assert_eq!(api.shape.mode, Mode::Enforce);
        assert_eq!(api.max_cost, 200);
        assert!(matches!(&api.cost, super::super::Cost::Header(h) if h == "x-cost"));
        let debug = format!("{:?}", file.rules[1]);
        // "delay mode only": ignored on this enforce rule.
        assert!(debug.contains("max_delay: None"), "{debug}");
        assert!(debug.contains("algorithm: Some(Gcra)"), "{debug}");
    }

    #[test]
    fn without_defaults_gcra_and_peer_ip() {
        let file = parse("[[rule]]\nname = \"all\"\nquota = \"10/s\"\n", "rules.toml").unwrap();
        assert!(file.skips.is_empty());
        let all = compile(&file.rules[0]);
        assert_eq!(all.policy.algorithm(), Algorithm::Gcra);
        assert_eq!(all.key.describe(), key::PeerIp::default().describe());
        assert!(all.route.matches(&parts("PUT", "/anything")));
        assert_eq!(all.max_cost, 10);
    }

    #[test]
    fn an_empty_file_has_no_rules() {
        let file = parse("# nothing yet\n", "rules.toml").unwrap();
        assert!(file.rules.is_empty() && file.skips.is_empty());
    }

    #[test]
    fn defaults_apply_and_rules_override() {
        let source = r#"
[defaults]
algorithm = "token_bucket"
key = "client_ip"
trusted_proxies = ["10.0.0.0/8", "192.168.1.1"]
quota = "10/s"
cost_header = "x-cost"
max_cost = 5
mode = "shadow"
max_delay = "1s"

[[rule]]
name = "inherits"

[[rule]]
name = "overrides"
algorithm = "sliding_window"
key = "header:X-Tenant or method or path or global"
quota = "7/min"
cost_header = "x-weight"
max_cost = 3
mode = "enforce"

[[rule]]
name = "queued"
algorithm = "leaky_bucket"
mode = "delay"

[[rule]]
name = "own-proxies"
trusted_proxies = ["172.16.0.0/12"]
"#;
        let file = parse(source, "rules.toml").unwrap();
        let inherits = compile(&file.rules[0]);
        assert_eq!(inherits.policy.algorithm(), Algorithm::TokenBucket);
        assert_eq!(inherits.quota, Quota::per_second(10));
        assert_eq!(inherits.max_cost, 5);
        assert_eq!(inherits.shape.mode, Mode::Shadow);
        assert!(matches!(&inherits.cost, super::super::Cost::Header(h) if h == "x-cost"));
        assert_eq!(inherits.key.describe(), key::ClientIp::default().describe());
        // max_delay from [defaults] applies only to delay-mode rules.
        assert!(format!("{:?}", file.rules[0]).contains("max_delay: None"));

        let overrides = compile(&file.rules[1]);
        assert_eq!(overrides.policy.algorithm(), Algorithm::SlidingWindow);
        assert_eq!(overrides.quota, Quota::per_minute(7));
        assert_eq!(overrides.max_cost, 3);
        assert_eq!(overrides.shape.mode, Mode::Enforce);
        assert!(matches!(&overrides.cost, super::super::Cost::Header(h) if h == "x-weight"));
        let chain = key::Header::new("x-tenant")
            .or(key::Method)
            .or(key::Path)
            .or(key::Global);
        assert_eq!(overrides.key.describe(), chain.describe());
        // The chain keys like `.or(...)`: the first branch as is, later ones marked.
        let req = parts("GET", "/x");
        assert_eq!(overrides.key.extract(&req), chain.extract(&req));

        let queued = compile(&file.rules[2]);
        assert_eq!(queued.shape.mode, Mode::Delay);
        assert!(format!("{:?}", file.rules[2]).contains("max_delay: Some(1s)"));

        // A rule's own trusted_proxies replace the defaults': a forwarded address is believed
        // only from 172.16/12.
        let own = compile(&file.rules[3]);
        let forwarded = |peer: &str| {
            let peer: std::net::SocketAddr = peer.parse().unwrap();
            http::Request::builder()
                .header("x-forwarded-for", "203.0.113.9")
                .extension(axum::extract::ConnectInfo(peer))
                .body(())
                .unwrap()
                .into_parts()
                .0
        };
        assert_eq!(
            own.key.extract(&forwarded("172.16.0.1:1")).as_deref(),
            Some("203.0.113.9")
        );
        assert_eq!(
            own.key.extract(&forwarded("10.0.0.1:1")).as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(
            inherits.key.extract(&forwarded("10.0.0.1:1")).as_deref(),
            Some("203.0.113.9")
        );
    }

    #[test]
    fn inline_tables_work_too() {
        let file = parse(
            "rule = [{ name = \"a\", quota = \"1/s\" }, { name = \"b\", quota = \"2/s\" }]\n",
            "rules.toml",
        )
        .unwrap();
        assert_eq!(file.rules.len(), 2);
        let e = error("rule = [{ name = \"a\", quota = \"1/s\" }, { name = \"b\", speed = 1 }]\n");
        assert_error(
            &e,
            "1:54",
            &["rule \"b\"", "unknown field `speed`", "`quota`"],
        );
    }

    #[test]
    fn unknown_field_at_top_level() {
        let e = error("[[rule]]\nname = \"a\"\nquota = \"1/s\"\n\n[rules]\nx = 1\n");
        assert_error(
            &e,
            "5:2",
            &["unknown field `rules`", "`defaults`", "`skip`", "`rule`"],
        );
    }

    #[test]
    fn unknown_field_in_defaults() {
        let e = error("[defaults]\nalgorithm = \"gcra\"\nalgo = \"gcra\"\n");
        assert_error(
            &e,
            "3:1",
            &[
                "defaults: ",
                "unknown field `algo`",
                "`algorithm`",
                "`trusted_proxies`",
            ],
        );
    }

    #[test]
    fn unknown_field_in_a_rule() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\n  speed = 3\n");
        assert_error(
            &e,
            "4:3",
            &[
                "rule \"api\": ",
                "unknown field `speed`",
                "`name`",
                "`max_delay`",
            ],
        );
    }

    #[test]
    fn unknown_field_in_a_skip() {
        let e = error("[[skip]]\npath = \"/health\"\n\n[[skip]]\npaths = [\"/x\"]\n");
        assert_error(
            &e,
            "5:1",
            &["skip #2: ", "unknown field `paths`", "`path`", "`methods`"],
        );
    }

    #[test]
    fn a_wrong_type_names_the_field() {
        let e = error("[[rule]]\nname = \"api\"\nquota = 5\n");
        assert_error(
            &e,
            "3:9",
            &[
                "rule \"api\": quota: ",
                "invalid type: integer `5`",
                "string",
            ],
        );
        let e = error("[defaults]\nmax_cost = \"x\"\n");
        assert_error(&e, "2:12", &["defaults: max_cost: ", "invalid type"]);
    }

    #[test]
    fn bad_algorithm() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nalgorithm = \"gcra2\"\n");
        assert_error(
            &e,
            "4:13",
            &[
                "rule \"api\": algorithm: ",
                "unknown algorithm \"gcra2\"",
                "gcra",
                "sliding_window_log",
            ],
        );
        let e = error("[defaults]\nalgorithm = \"Gcra\"\n");
        assert_error(&e, "2:13", &["defaults: algorithm: ", "token_bucket"]);
    }

    #[test]
    fn bad_key() {
        let e = error(
            "[[rule]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"header:x-api-key or cookie\"\n",
        );
        assert_error(
            &e,
            "4:7",
            &[
                "rule \"api\": key: ",
                "unknown key \"cookie\"",
                "ip, client_ip, header:NAME, path, method or global",
                "\" or \"",
            ],
        );
        let e = error("[defaults]\nkey = \"ip or\"\n");
        assert_error(&e, "2:7", &["defaults: key: ", "unknown key \"ip or\""]);
    }

    #[test]
    fn bad_header_name() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"header:x api\"\n");
        assert_error(
            &e,
            "4:7",
            &[
                "rule \"api\": key: ",
                "invalid header name \"x api\"",
                "e.g. \"x-api-key\"",
            ],
        );
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\ncost_header = \"x:cost\"\n");
        assert_error(
            &e,
            "4:15",
            &[
                "rule \"api\": cost_header: ",
                "invalid header name \"x:cost\"",
            ],
        );
        let e = error("[defaults]\nkey = \"header:\"\n");
        assert_error(&e, "2:7", &["defaults: key: ", "invalid header name \"\""]);
    }

    #[test]
    fn bad_quota() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"100/fortnight\"\n");
        assert_error(
            &e,
            "3:9",
            &[
                "rule \"api\": quota: ",
                "invalid quota \"100/fortnight\"",
                "unknown period unit \"fortnight\"",
                "us, ms, s, min, h or day",
            ],
        );
    }

    #[test]
    fn a_burst_the_algorithm_cannot_use() {
        let e = error(
            "[[rule]]\nname = \"w\"\nquota = \"10/s; burst=20\"\nalgorithm = \"fixed_window\"\n",
        );
        assert_error(
            &e,
            "3:9",
            &[
                "rule \"w\": quota: ",
                "burst is not used by fixed_window",
                "gcra",
            ],
        );
        // With the quota from [defaults], the rule's algorithm is what conflicts.
        let e = error("[defaults]\nquota = \"10/s; burst=20\"\n[[rule]]\nname = \"w\"\nalgorithm = \"fixed_window\"\n");
        assert_error(
            &e,
            "5:13",
            &["rule \"w\": algorithm: ", "burst is not used"],
        );
    }

    #[test]
    fn missing_quota() {
        let e = error("[defaults]\nkey = \"ip\"\n\n[[rule]]\nname = \"api\"\npath = \"/api/*\"\n");
        assert_error(
            &e,
            "4:1",
            &[
                "rule \"api\": quota: ",
                "missing",
                "[defaults]",
                "quota = \"100/min\"",
            ],
        );
    }

    #[test]
    fn missing_name() {
        let e = error("[[rule]]\nname = \"a\"\nquota = \"1/s\"\n\n[[rule]]\nquota = \"1/s\"\n");
        assert_error(&e, "5:1", &["rule #2: name: ", "missing", "name = \"api\""]);
        let e = error("[[rule]]\nname = \"a b\"\nquota = \"1/s\"\n");
        assert_error(
            &e,
            "2:8",
            &["rule \"a b\": name: ", "ASCII letters, digits"],
        );
    }

    #[test]
    fn bad_mode() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmode = \"loud\"\n");
        assert_error(
            &e,
            "4:8",
            &[
                "rule \"api\": mode: ",
                "unknown mode \"loud\"",
                "enforce, shadow or delay",
            ],
        );
    }

    #[test]
    fn max_delay_outside_delay_mode_is_ignored() {
        for source in [
            "[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmode = \"shadow\"\nmax_delay = \"2s\"\n",
            "[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmax_delay = \"2s\"\n",
        ] {
            let file = parse(source, "rules.toml").unwrap();
            assert!(format!("{:?}", file.rules[0]).contains("max_delay: None"));
        }
    }

    #[test]
    fn delay_without_max_delay() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmode = \"delay\"\n");
        assert_error(
            &e,
            "4:8",
            &[
                "rule \"api\": mode: ",
                "needs max_delay",
                "max_delay = \"2s\"",
            ],
        );
        // Delay mode from [defaults]: the rule is where max_delay is missing.
        let e = error("[defaults]\nmode = \"delay\"\n[[rule]]\nname = \"api\"\nquota = \"1/s\"\n");
        assert_error(&e, "3:1", &["rule \"api\": mode: ", "needs max_delay"]);
    }

    #[test]
    fn delay_with_a_window_algorithm() {
        let e = error(
            "[[rule]]\nname = \"api\"\nquota = \"1/s\"\nalgorithm = \"fixed_window\"\nmode = \"delay\"\nmax_delay = \"1s\"\n",
        );
        assert_error(
            &e,
            "5:8",
            &[
                "rule \"api\": mode: ",
                "gcra, token_bucket or leaky_bucket",
                "fixed_window",
            ],
        );
        assert!(!e.contains("rule \"api\": mode: rule"), "{e}");
    }

    #[test]
    fn bad_duration() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmode = \"delay\"\nmax_delay = \"2 fortnights\"\n");
        assert_error(
            &e,
            "5:13",
            &[
                "rule \"api\": max_delay: ",
                "invalid duration \"2 fortnights\"",
                "us, ms, s, min, h or day",
            ],
        );
        let e = error("[defaults]\nmax_delay = \"0s\"\n");
        assert_error(&e, "2:13", &["defaults: max_delay: ", "longer than zero"]);
    }

    #[test]
    fn bad_max_cost() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmax_cost = 0\n");
        assert_error(
            &e,
            "4:12",
            &["rule \"api\": max_cost: ", "from 1 to 4294967295"],
        );
        let e = error("[defaults]\nmax_cost = 5000000000\n");
        assert_error(&e, "2:12", &["defaults: max_cost: ", "out of range"]);
    }

    #[test]
    fn bad_methods() {
        let e =
            error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmethods = [\"GET\", \"PO ST\"]\n");
        assert_error(
            &e,
            "4:19",
            &[
                "rule \"api\": methods: ",
                "invalid HTTP method \"PO ST\"",
                "GET, POST",
            ],
        );
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmethods = []\n");
        assert_error(
            &e,
            "4:11",
            &["rule \"api\": methods: ", "leave methods out"],
        );
        let e = error("[[skip]]\npath = \"/x\"\nmethods = [\"\"]\n");
        assert_error(&e, "3:12", &["skip #1: methods: ", "invalid HTTP method"]);
    }

    #[test]
    fn bad_path_pattern() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\npath = \"/api*\"\n");
        assert_error(
            &e,
            "4:8",
            &["rule \"api\": path: ", "\"/api*\"", "\"/api/*\""],
        );
        let e = error("[[skip]]\npath = \"health\"\n");
        assert_error(&e, "2:8", &["skip #1: path: ", "must start with '/'"]);
        let e = error("[[skip]]\nmethods = [\"GET\"]\n");
        assert_error(
            &e,
            "1:1",
            &["skip #1: path: ", "missing", "path = \"/health\""],
        );
    }

    #[test]
    fn bad_cidr() {
        let e = error(
            "[defaults]\nkey = \"client_ip\"\ntrusted_proxies = [\"10.0.0.0/8\", \"10.0.0/8\"]\n",
        );
        assert_error(
            &e,
            "3:34",
            &[
                "defaults: trusted_proxies: ",
                "invalid CIDR \"10.0.0/8\"",
                "\"10.0.0.0/8\"",
            ],
        );
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"client_ip\"\ntrusted_proxies = [\"::1/129\"]\n");
        assert_error(
            &e,
            "5:20",
            &["rule \"api\": trusted_proxies: ", "\"::1/129\""],
        );
    }

    #[test]
    fn trusted_proxies_without_client_ip() {
        let e = error(
            "[[rule]]\nname = \"api\"\nquota = \"1/s\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
        );
        assert_error(
            &e,
            "4:19",
            &[
                "rule \"api\": trusted_proxies: ",
                "only to key \"client_ip\"",
            ],
        );
    }

    #[test]
    fn duplicate_names() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\n\n[[rule]]\nname = \"api\"\nquota = \"2/s\"\n");
        assert_error(
            &e,
            "6:8",
            &[
                "rule \"api\": name: ",
                "duplicate rule name \"api\"",
                "line 2",
                "unique",
            ],
        );
    }

    #[test]
    fn toml_syntax_error() {
        let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\n");
        assert_error(&e, "3:13", &["TOML syntax error: ", "invalid basic string"]);
        assert!(!e.contains('\n'), "{e:?}");
        let e = error("[[rule]]\nname = \"a\"\nname = \"b\"\n");
        assert_error(&e, "3:1", &["TOML syntax error: ", "duplicate key"]);
        // Columns count characters, as toml's own messages do.
        let e = error("[[rule]]\nname = \"é\" x\n");
        assert_error(&e, "2:12", &["TOML syntax error: "]);
    }

    #[test]
    fn errors_use_the_origin_given() {
        let e = parse("x = 1", "/etc/app/limits.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/etc/app/limits.toml:1:1: "), "{e}");
    }

    /// Lines that make up plausible rules files, to reach deep into the checks.
    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("[defaults]".to_owned()),
            Just("[[rule]]".to_owned()),
            Just("[[skip]]".to_owned()),
            Just("name = \"a\"".to_owned()),
            Just("name = \"b\"".to_owned()),
            Just("quota = \"5/s; burst=9\"".to_owned()),
            Just("mode = \"delay\"".to_owned()),
            Just("max_delay = \"1s\"".to_owned()),
            Just("max_cost = 0".to_owned()),
            Just("algorithm = \"fixed_window\"".to_owned()),
            Just("key = \"client_ip or header:x\"".to_owned()),
            Just("trusted_proxies = [\"10.0.0.0/8\"]".to_owned()),
            Just("methods = [\"GET\"]".to_owned()),
            Just("path = \"/a/*\"".to_owned()),
            "[a-z_]{1,12} = \"[ -~]{0,12}\"",
            "[a-z_]{1,12} = -?[0-9]{1,11}",
            "[ -~é]{0,20}",
        ]
    }

    proptest! {
        #[test]
        fn parse_never_panics_on_any_text(text in any::<String>()) {
            let _ = parse(&text, "rules.toml");
        }

        #[test]
        fn parse_never_panics_on_rules_like_text(lines in prop::collection::vec(fragment(), 0..16)) {
            let text = lines.join("\n");
            if let Err(e) = parse(&text, "rules.toml") {
                prop_assert!(e.to_string().starts_with("rules.toml:"), "{}", e);
            }
        }
    }
}
