//! Reading one of the reference's YAML files: its keys checked as the reference checks them,
//! then its values read into plain structs. Nothing here knows about limits or stores.
//!
//! Text fields (`domain`, `key`, `value`, `name`, `unit`, …) keep a scalar as written, as the
//! reference's parser (gopkg.in/yaml.v2 into a Go `string`) keeps it: `value: 0x1F` is the
//! text `0x1F`, not `31`, and `True` stays `True`.

use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, NullValue, Struct, Value as ProtoValue};
use serde::Deserialize;
use serde_norway::{Mapping, Value};

/// Every key the reference accepts, at any depth, and tollgate's extensions.
const VALID_KEYS: &[&str] = &[
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
    // tollgate's extensions (see docs/envoy.md)
    "unit_multiplier",
    "algorithm",
    "burst",
    "lease",
];

/// A file: one domain and its descriptors.
#[derive(Debug, Default)]
pub(super) struct YamlRoot {
    pub(super) domain: String,
    pub(super) descriptors: Vec<YamlDescriptor>,
}

/// One `descriptors` entry.
#[derive(Debug, Default)]
pub(super) struct YamlDescriptor {
    pub(super) key: String,
    pub(super) value: String,
    pub(super) rate_limit: Option<YamlRateLimit>,
    pub(super) descriptors: Vec<YamlDescriptor>,
    pub(super) shadow_mode: bool,
    pub(super) quota_mode: bool,
    pub(super) detailed_metric: bool,
    pub(super) value_to_metric: bool,
    pub(super) share_threshold: bool,
    /// `metadata`: anything, sent back as dynamic metadata when the request passes.
    pub(super) metadata: Option<envoy_types::pb::google::protobuf::Struct>,
}

/// A `rate_limit` block.
#[derive(Debug, Default)]
pub(super) struct YamlRateLimit {
    pub(super) requests_per_unit: u32,
    pub(super) unit: String,
    pub(super) unlimited: bool,
    pub(super) name: String,
    pub(super) replaces: Vec<String>,
    /// Extension: the window is this many units (default 1).
    pub(super) unit_multiplier: Option<u32>,
    /// Extension: one of tollgate's algorithms (default fixed_window).
    pub(super) algorithm: Option<String>,
    /// Extension: the bucket's capacity, for the bucket algorithms.
    pub(super) burst: Option<u32>,
    /// Extension: `auto` or a number of units leased per instance.
    pub(super) lease: Option<String>,
}

/// Parses `content`; the error is the reference's text, without the file name.
pub(super) fn parse(content: &str) -> Result<YamlRoot, String> {
    let document: Value =
        serde_norway::from_str(content).map_err(|e| format!("error loading config file: {e}"))?;
    let root = match document {
        // An empty file is an empty map (which then has no domain).
        Value::Null => Mapping::new(),
        Value::Mapping(map) => map,
        other => {
            return Err(format!(
                "error loading config file: the file must be a map of `domain` and \
                 `descriptors`, not {}",
                kind(&other)
            ))
        }
    };
    check_keys(&root)?;
    let mut parsed = YamlRoot {
        domain: text(&root, "domain")?,
        descriptors: descriptors(&root)?,
    };
    // The same document again, for its scalars' text: every field read below was checked
    // above to be a scalar, a map or a list where expected, so this cannot fail on them.
    if let Ok(raw) = serde_norway::from_str::<RawRoot>(content) {
        parsed.keep_as_written(raw);
    }
    Ok(parsed)
}

/// The text fields of a file, each scalar as written (`None`: absent or null).
#[derive(Deserialize, Default)]
#[serde(default)]
struct RawRoot {
    domain: Option<String>,
    descriptors: Option<Vec<RawDescriptor>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawDescriptor {
    key: Option<String>,
    value: Option<String>,
    rate_limit: Option<RawRateLimit>,
    descriptors: Option<Vec<RawDescriptor>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawRateLimit {
    unit: Option<String>,
    name: Option<String>,
    replaces: Option<Vec<RawReplaces>>,
    algorithm: Option<String>,
    lease: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawReplaces {
    name: Option<String>,
}

/// Puts the text as written in place of the text a scalar was resolved to.
fn keep(text: &mut String, raw: Option<String>) {
    if let Some(raw) = raw {
        *text = raw;
    }
}

impl YamlRoot {
    fn keep_as_written(&mut self, raw: RawRoot) {
        keep(&mut self.domain, raw.domain);
        keep_descriptors(&mut self.descriptors, raw.descriptors);
    }
}

fn keep_descriptors(parsed: &mut [YamlDescriptor], raw: Option<Vec<RawDescriptor>>) {
    for (d, raw) in parsed.iter_mut().zip(raw.unwrap_or_default()) {
        keep(&mut d.key, raw.key);
        keep(&mut d.value, raw.value);
        if let (Some(r), Some(raw)) = (&mut d.rate_limit, raw.rate_limit) {
            keep(&mut r.unit, raw.unit);
            keep(&mut r.name, raw.name);
            for (name, raw) in r.replaces.iter_mut().zip(raw.replaces.unwrap_or_default()) {
                keep(name, raw.name);
            }
            if let Some(algorithm) = &mut r.algorithm {
                keep(algorithm, raw.algorithm);
            }
            if let Some(lease) = &mut r.lease {
                keep(lease, raw.lease);
            }
        }
        keep_descriptors(&mut d.descriptors, raw.descriptors);
    }
}

/// The reference's key check: every key a string and a known one, lists only of maps, and
/// leaves only strings, integers, booleans or nothing. `metadata` holds anything.
fn check_keys(map: &Mapping) -> Result<(), String> {
    for (key, value) in map {
        let Value::String(key) = key else {
            return Err(format!(
                "config error, key is not of type string: {}",
                render(key)
            ));
        };
        if !VALID_KEYS.contains(&key.as_str()) {
            return Err(format!("config error, unknown key '{key}'"));
        }
        if key == "metadata" {
            continue;
        }
        match value {
            Value::Sequence(items) => {
                for item in items {
                    let Value::Mapping(item) = item else {
                        return Err(format!(
                            "config error, yaml file contains list of type other than map: {}",
                            render(item)
                        ));
                    };
                    check_keys(item)?;
                }
            }
            Value::Mapping(inner) => check_keys(inner)?,
            Value::Number(n) if n.is_f64() => return Err("error checking config".into()),
            Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => {}
            Value::Tagged(_) => return Err("error checking config".into()),
        }
    }
    Ok(())
}

fn descriptors(map: &Mapping) -> Result<Vec<YamlDescriptor>, String> {
    match map.get("descriptors") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::Mapping(m) => descriptor(m),
                other => Err(format!(
                    "config error, yaml file contains list of type other than map: {}",
                    render(other)
                )),
            })
            .collect(),
        Some(other) => Err(wrong_type("descriptors", "a list", other)),
    }
}

fn descriptor(map: &Mapping) -> Result<YamlDescriptor, String> {
    let rate_limit = match map.get("rate_limit") {
        None | Some(Value::Null) => None,
        Some(Value::Mapping(m)) => Some(rate_limit(m)?),
        Some(other) => return Err(wrong_type("rate_limit", "a map", other)),
    };
    Ok(YamlDescriptor {
        key: text(map, "key")?,
        value: text(map, "value")?,
        rate_limit,
        descriptors: descriptors(map)?,
        shadow_mode: flag(map, "shadow_mode")?,
        quota_mode: flag(map, "quota_mode")?,
        detailed_metric: flag(map, "detailed_metric")?,
        value_to_metric: flag(map, "value_to_metric")?,
        share_threshold: flag(map, "share_threshold")?,
        metadata: match map.get("metadata") {
            None => None,
            Some(m) => metadata_from_yaml(m)?,
        },
    })
}

fn rate_limit(map: &Mapping) -> Result<YamlRateLimit, String> {
    let replaces = match map.get("replaces") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::Mapping(m) => text(m, "name"),
                other => Err(wrong_type("replaces", "a list of maps", other)),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(wrong_type("replaces", "a list", other)),
    };
    let lease = match map.get("lease") {
        None | Some(Value::Null) => None,
        Some(_) => Some(text(map, "lease")?),
    };
    let algorithm = match map.get("algorithm") {
        None | Some(Value::Null) => None,
        Some(_) => Some(text(map, "algorithm")?),
    };
    Ok(YamlRateLimit {
        requests_per_unit: number(map, "requests_per_unit")?.unwrap_or(0),
        unit: text(map, "unit")?,
        unlimited: flag(map, "unlimited")?,
        name: text(map, "name")?,
        replaces,
        unit_multiplier: number(map, "unit_multiplier")?,
        algorithm,
        burst: number(map, "burst")?,
        lease,
    })
}

/// A string field; as in the reference, any scalar is taken as its text and a missing or
/// empty one is "".
fn text(map: &Mapping, field: &str) -> Result<String, String> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Bool(b)) => Ok(b.to_string()),
        Some(other) => Err(wrong_type(field, "a string", other)),
    }
}

/// A boolean field; YAML 1.1's words (`yes`, `on`, …) count, as they do for the reference's
/// parser.
fn flag(map: &Mapping, field: &str) -> Result<bool, String> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => match s.as_str() {
            "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
                Ok(true)
            }
            "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False"
            | "FALSE" => Ok(false),
            _ => Err(wrong_type(
                field,
                "true or false",
                &Value::String(s.clone()),
            )),
        },
        Some(other) => Err(wrong_type(field, "true or false", other)),
    }
}

/// A whole number from 0 to 4294967295, if present.
fn number(map: &Mapping, field: &str) -> Result<Option<u32>, String> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "error loading config file: {field} must be a whole number from 0 to \
                     4294967295, not {n}"
                )
            }),
        Some(other) => Err(wrong_type(field, "a whole number", other)),
    }
}

fn wrong_type(field: &str, expected: &str, found: &Value) -> String {
    format!(
        "error loading config file: {field} must be {expected}, not {} {}",
        kind(found),
        render(found)
    )
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a map",
        Value::Tagged(_) => "a tagged value",
    }
}

/// A value as the reference prints it in errors (`%v`).
fn render(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => serde_norway::to_string(other)
            .map(|s| s.trim_end().to_owned())
            .unwrap_or_else(|_| kind(other).into()),
    }
}

/// A limit's YAML `metadata` as the reference converts it (`parseMetadata`): maps become
/// structs (keys written out as text), sequences lists, numbers doubles.
pub(super) fn metadata_from_yaml(yaml: &Value) -> Result<Option<Struct>, String> {
    match yaml {
        Value::Null => Ok(None),
        Value::Mapping(map) if map.is_empty() => Ok(None),
        Value::Mapping(_) => match metadata_value(yaml).kind {
            Some(Kind::StructValue(s)) => Ok(Some(s)),
            _ => Ok(None),
        },
        _ => Err("error parsing metadata: metadata must be a map".into()),
    }
}

fn metadata_value(yaml: &Value) -> ProtoValue {
    let kind = match yaml {
        Value::Null => Kind::NullValue(NullValue::NullValue as i32),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Sequence(items) => Kind::ListValue(ListValue {
            values: items.iter().map(metadata_value).collect(),
        }),
        Value::Mapping(map) => Kind::StructValue(Struct {
            fields: map
                .iter()
                .map(|(k, v)| (key_text(k), metadata_value(v)))
                .collect(),
        }),
        Value::Tagged(tagged) => return metadata_value(&tagged.value),
    };
    ProtoValue { kind: Some(kind) }
}

/// A map key as Go's `fmt.Sprintf("%v", k)` writes it.
fn key_text(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => "<nil>".into(),
        other => serde_norway::to_string(other)
            .map(|s| s.trim_end().to_owned())
            .unwrap_or_default(),
    }
}
