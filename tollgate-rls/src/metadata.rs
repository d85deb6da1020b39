//! Dynamic metadata, as the reference sends it when `RESPONSE_DYNAMIC_METADATA` is on
//! (envoyproxy/ratelimit, `src/service/ratelimit.go`, `ratelimitToMetadata`): the request's
//! domain, its descriptors (`entries` as `key=value`, Envoy's own `limit`, `hitsAddend`), the
//! request's `hitsAddend`, and the YAML `metadata` of every limit the request passed, merged.
//! Envoy puts it under `envoy.filters.http.ratelimit`, where later filters and access logs
//! read it.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};

use super::plan::{Item, Plan};

/// The dynamic metadata of one answer: `statuses` are the response's, in the plan's order.
pub(super) fn of_answer(
    request: &RateLimitRequest,
    plan: &Plan<'_>,
    statuses: &[DescriptorStatus],
) -> Struct {
    let mut fields = std::collections::HashMap::new();
    fields.insert("domain".to_owned(), text(request.domain.clone()));
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    fields.insert("descriptors".to_owned(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert("hitsAddend".to_owned(), number(request.hits_addend));
    }
    // The limits the request passed (not over; unlimited ones aside), merged in order.
    let mut passed = Struct::default();
    for (item, status) in plan.items.iter().zip(statuses) {
        if let Item::Limited(l) = item {
            if status.code != Code::OverLimit as i32 {
                if let Some(metadata) = &l.limit.metadata {
                    merge(&mut passed, metadata);
                }
            }
        }
    }
    if !passed.fields.is_empty() {
        let kind = Kind::StructValue(passed);
        fields.insert("metadata".to_owned(), Value { kind: Some(kind) });
    }
    Struct { fields }
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut fields = std::collections::HashMap::new();
    let entries = (d.entries.iter())
        .map(|e| text(format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert("entries".to_owned(), list(entries));
    if let Some(limit) = &d.limit {
        // Go's text form of the message, as `descriptor.Limit.String()` gives it.
        let unit = Unit::try_from(limit.unit).unwrap_or(Unit::Unknown);
        let text_form = format!(
            "requests_per_unit:{} unit:{}",
            limit.requests_per_unit,
            unit.as_str_name()
        );
        fields.insert("limit".to_owned(), text(text_form));
    }
    if let Some(hits) = &d.hits_addend {
        fields.insert("hitsAddend".to_owned(), number(hits.value as f64));
    }
    Value {
        kind: Some(Kind::StructValue(Struct { fields })),
    }
}

/// Adds `source`'s fields that `dest` lacks; structs on both sides are merged in turn, and
/// for anything else the first one stays (the reference's `mergeMetadata`).
fn merge(dest: &mut Struct, source: &Struct) {
    for (key, value) in &source.fields {
        match dest.fields.get_mut(key) {
            None => {
                dest.fields.insert(key.clone(), value.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(inner)),
            }) => {
                if let Some(Kind::StructValue(from)) = &value.kind {
                    merge(inner, from);
                }
            }
            Some(_) => {}
        }
    }
}

fn text(s: String) -> Value {
    Value {
        kind: Some(Kind::StringValue(s)),
    }
}

fn number(n: impl Into<f64>) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n.into())),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

/// A `Struct` as proto3 JSON writes it: a plain JSON object.
pub(super) fn to_json(s: &Struct) -> serde_json::Value {
    let fields = (s.fields.iter())
        .map(|(k, v)| (k.clone(), value_json(v)))
        .collect();
    serde_json::Value::Object(fields)
}

fn value_json(v: &Value) -> serde_json::Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(n)) => serde_json::Number::from_f64(*n)
            .map_or(serde_json::Value::Null, serde_json::Value::Number),
        Some(Kind::StringValue(s)) => s.clone().into(),
        Some(Kind::BoolValue(b)) => (*b).into(),
        Some(Kind::StructValue(s)) => to_json(s),
        Some(Kind::ListValue(l)) => l.values.iter().map(value_json).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::yaml::metadata_from_yaml as from_yaml;
    use super::*;
    use serde_norway::Value as Yaml;

    fn yaml(text: &str) -> Yaml {
        serde_norway::from_str(text).unwrap()
    }

    #[test]
    fn yaml_metadata_becomes_a_struct_as_the_reference_converts_it() {
        let s = from_yaml(&yaml(
            "name: gold\nweight: 2\nnested: { a: [1, x, true] }\n",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            to_json(&s),
            serde_json::json!({"name": "gold", "weight": 2.0, "nested": {"a": [1.0, "x", true]}})
        );
        assert_eq!(from_yaml(&Yaml::Null), Ok(None));
        assert!(from_yaml(&yaml("[1, 2]")).is_err());
    }

    #[test]
    fn merging_keeps_the_first_value_and_merges_structs() {
        let mut dest = from_yaml(&yaml("a: 1\nnested: { x: 1 }\n"))
            .unwrap()
            .unwrap();
        let source = from_yaml(&yaml("a: 2\nb: 3\nnested: { x: 2, y: 2 }\n"))
            .unwrap()
            .unwrap();
        merge(&mut dest, &source);
        assert_eq!(
            to_json(&dest),
            serde_json::json!({"a": 1.0, "b": 3.0, "nested": {"x": 1.0, "y": 2.0}})
        );
    }
}
