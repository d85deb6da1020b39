//! The reference's `POST /json`: the request and the response in proto3's JSON form, for
//! clients that cannot speak gRPC (e.g. a Lua script).

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{json, Map, Value};

use super::limits;
use super::service::RateLimitService;

/// An HTTP answer to `POST /json`: its status code and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JsonAnswer {
    /// 200, 429 when over the limit, 400 for a request that cannot be read or that the service
    /// answers with an error (a failing store, as in the reference).
    pub status: u16,
    /// The response in proto3 JSON (or a short text for a 400).
    pub body: String,
}

impl RateLimitService {
    /// Answers a request given in proto3 JSON, as the reference's `POST /json` does:
    /// `{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}`. A request
    /// past one of the [bounds](crate#limits) is a 400 naming it: a body over
    /// [`MAX_REQUEST_BYTES`](crate::MAX_REQUEST_BYTES) before it is parsed, too many
    /// descriptors or entries before any is matched.
    ///
    /// ```
    /// use tollgate_rls::{RateLimitService, RlsConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    /// let service = RateLimitService::builder()
    ///     .config(RlsConfig::from_yaml([("d.yaml", yaml)], tollgate_rls::DuplicateDomains::Refuse)?)
    ///     .build()?;
    /// let body = br#"{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#;
    /// assert_eq!(service.decide_json(body).await.status, 200);
    /// let over = service.decide_json(body).await;
    /// assert_eq!(over.status, 429);
    /// assert!(over.body.starts_with(r#"{"overallCode":"OVER_LIMIT""#));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// # }).unwrap();
    /// ```
    pub async fn decide_json(&self, body: &[u8]) -> JsonAnswer {
        let bad = |why: String| JsonAnswer {
            status: 400,
            body: format!("Bad Request: {why}\n"),
        };
        let request = match limits::bytes(body.len())
            .map_err(|over| over.message().to_owned())
            .and_then(|()| serde_json::from_slice::<Value>(body).map_err(|e| e.to_string()))
            .and_then(|v| request(&v))
        {
            Ok(request) => request,
            Err(why) => return bad(why),
        };
        match self.decide(&request).await {
            Ok(response) => JsonAnswer {
                status: match Code::try_from(response.overall_code) {
                    Ok(Code::OverLimit) => 429,
                    Ok(Code::Ok) => 200,
                    _ => 500,
                },
                body: response_json(&response).to_string(),
            },
            Err(status) => bad(status.message().to_owned()),
        }
    }
}

/// A field by its JSON name or its proto name.
fn field<'v>(map: &'v Map<String, Value>, json: &str, proto: &str) -> Option<&'v Value> {
    map.get(json)
        .or_else(|| map.get(proto))
        .filter(|v| !v.is_null())
}

fn object<'v>(value: &'v Value, what: &str) -> Result<&'v Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{what} must be an object"))
}

/// Refuses fields proto3 JSON does not know, as the reference's parser does.
fn known(map: &Map<String, Value>, what: &str, fields: &[&str]) -> Result<(), String> {
    match map.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(k) => Err(format!("unknown field {k:?} in {what}")),
        None => Ok(()),
    }
}

fn text(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{what} must be a string")),
    }
}

/// A number, or a number in a string (proto3 JSON allows both).
fn number(value: Option<&Value>, what: &str) -> Result<u64, String> {
    match value {
        None => Some(0),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        Some(_) => None,
    }
    .ok_or_else(|| format!("{what} must be a whole number"))
}

fn u32_number(value: Option<&Value>, what: &str) -> Result<u32, String> {
    u32::try_from(number(value, what)?).map_err(|_| format!("{what} is too large"))
}

fn request(value: &Value) -> Result<RateLimitRequest, String> {
    let map = object(value, "the request")?;
    known(
        map,
        "the request",
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
    )?;
    let descriptors = match field(map, "descriptors", "descriptors") {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            limits::descriptors(items.len()).map_err(|over| over.message().to_owned())?;
            (items.iter().enumerate())
                .map(|(i, d)| descriptor(i, d))
                .collect::<Result<_, _>>()?
        }
        Some(_) => return Err("descriptors must be a list".into()),
    };
    Ok(RateLimitRequest {
        domain: text(map.get("domain"), "domain")?,
        descriptors,
        hits_addend: u32_number(field(map, "hitsAddend", "hits_addend"), "hitsAddend")?,
    })
}

fn descriptor(index: usize, value: &Value) -> Result<RateLimitDescriptor, String> {
    let map = object(value, "a descriptor")?;
    let fields = [
        "entries",
        "limit",
        "hitsAddend",
        "hits_addend",
        "isNegativeHits",
        "is_negative_hits",
    ];
    known(map, "a descriptor", &fields)?;
    let entries = match map.get("entries") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            limits::entries(index, items.len()).map_err(|over| over.message().to_owned())?;
            items
                .iter()
                .map(|e| {
                    let e = object(e, "an entry")?;
                    known(e, "an entry", &["key", "value"])?;
                    Ok(Entry {
                        key: text(e.get("key"), "key")?,
                        value: text(e.get("value"), "value")?,
                    })
                })
                .collect::<Result<_, String>>()?
        }
        Some(_) => return Err("entries must be a list".into()),
    };
    let limit = match map.get("limit") {
        None | Some(Value::Null) => None,
        Some(limit) => {
            let l = object(limit, "a limit")?;
            let names = ["requestsPerUnit", "requests_per_unit", "unit"];
            known(l, "a limit", &names)?;
            let unit = match l.get("unit") {
                None => Unit::Unknown as i32,
                Some(Value::String(s)) => {
                    Unit::from_str_name(s).ok_or_else(|| format!("unknown unit {s:?}"))? as i32
                }
                Some(n) => u32_number(Some(n), "unit")? as i32,
            };
            let per_unit = field(l, "requestsPerUnit", "requests_per_unit");
            Some(RateLimitOverride {
                requests_per_unit: u32_number(per_unit, "requestsPerUnit")?,
                unit,
            })
        }
    };
    let hits = field(map, "hitsAddend", "hits_addend");
    let negative = field(map, "isNegativeHits", "is_negative_hits");
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend: match hits {
            None => None,
            Some(h) => Some(UInt64Value {
                value: number(Some(h), "hitsAddend")?,
            }),
        },
        is_negative_hits: match negative {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("isNegativeHits must be true or false".into()),
        },
    })
}

/// The response as proto3 JSON writes it: camelCase names, enums by name, fields at their
/// default left out.
fn response_json(r: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if let Ok(code) = Code::try_from(r.overall_code) {
        if code != Code::Unknown {
            out.insert("overallCode".into(), code.as_str_name().into());
        }
    }
    if !r.statuses.is_empty() {
        let statuses = r.statuses.iter().map(status_json).collect();
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers = (r.response_headers_to_add.iter())
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(metadata) = &r.dynamic_metadata {
        out.insert("dynamicMetadata".into(), super::metadata::to_json(metadata));
    }
    Value::Object(out)
}

fn status_json(s: &DescriptorStatus) -> Value {
    let mut out = Map::new();
    if let Ok(code) = Code::try_from(s.code) {
        if code != Code::Unknown {
            out.insert("code".into(), code.as_str_name().into());
        }
    }
    if let Some(limit) = &s.current_limit {
        let mut l = Map::new();
        if !limit.name.is_empty() {
            l.insert("name".into(), limit.name.clone().into());
        }
        if limit.requests_per_unit != 0 {
            l.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
        }
        if let Ok(unit) = Unit::try_from(limit.unit) {
            if unit != Unit::Unknown {
                l.insert("unit".into(), unit.as_str_name().into());
            }
        }
        out.insert("currentLimit".into(), Value::Object(l));
    }
    if s.limit_remaining != 0 {
        out.insert("limitRemaining".into(), s.limit_remaining.into());
    }
    if let Some(d) = &s.duration_until_reset {
        out.insert(
            "durationUntilReset".into(),
            format!("{}s", d.seconds).into(),
        );
    }
    Value::Object(out)
}
