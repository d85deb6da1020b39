//! An xDS `RateLimitConfig` resource read into the structs a YAML file is read into, as the
//! reference's `src/config/config_xds.go` does, so that `config.rs` compiles and checks both
//! the same way (same rules, same messages).

use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

use crate::yaml::{YamlDescriptor, YamlRateLimit, YamlRoot};

/// The resource's name (for errors) and its domain and descriptors.
pub(crate) fn to_root(resource: RateLimitConfig) -> (String, YamlRoot) {
    let root = YamlRoot {
        domain: resource.domain,
        descriptors: descriptors(resource.descriptors),
    };
    (resource.name, root)
}

fn descriptors(list: Vec<RateLimitDescriptor>) -> Vec<YamlDescriptor> {
    list.into_iter()
        .map(|d| YamlDescriptor {
            key: d.key,
            value: d.value,
            rate_limit: d.rate_limit.map(rate_limit),
            descriptors: descriptors(d.descriptors),
            shadow_mode: d.shadow_mode,
            quota_mode: d.quota_mode,
            detailed_metric: d.detailed_metric,
            // The proto has no field for these (nor for tollgate's extensions).
            value_to_metric: false,
            share_threshold: false,
            metadata: d.metadata,
        })
        .collect()
}

fn rate_limit(p: RateLimitPolicy) -> YamlRateLimit {
    // A number the enum does not know reads as UNKNOWN, which is then refused as the
    // reference refuses it ("invalid rate limit unit 'UNKNOWN'").
    let unit = RateLimitUnit::try_from(p.unit).unwrap_or(RateLimitUnit::Unknown);
    YamlRateLimit {
        requests_per_unit: p.requests_per_unit,
        unit: unit.as_str_name().to_owned(),
        unlimited: p.unlimited,
        name: p.name,
        replaces: p.replaces.into_iter().map(|r| r.name).collect(),
        ..YamlRateLimit::default()
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;

    use super::*;
    use crate::config::RlsConfig;

    fn limit(unit: RateLimitUnit, n: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: n,
            ..RateLimitPolicy::default()
        })
    }

    fn compile(resources: Vec<RateLimitConfig>) -> Result<RlsConfig, String> {
        RlsConfig::from_roots(resources.into_iter().map(to_root), false).map_err(|e| e.to_string())
    }

    #[test]
    fn a_resource_compiles_as_its_yaml_does() {
        let resource = RateLimitConfig {
            name: "edge".into(),
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "remote_address".into(),
                rate_limit: limit(RateLimitUnit::Minute, 5),
                descriptors: vec![RateLimitDescriptor {
                    key: "path".into(),
                    value: "/api".into(),
                    rate_limit: Some(RateLimitPolicy {
                        unit: RateLimitUnit::Second as i32,
                        requests_per_unit: 1,
                        name: "api".into(),
                        replaces: vec![RateLimitReplace {
                            name: "other".into(),
                        }],
                        ..RateLimitPolicy::default()
                    }),
                    ..RateLimitDescriptor::default()
                }],
                ..RateLimitDescriptor::default()
            }],
        };
        let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: MINUTE, requests_per_unit: 5 }\n    descriptors:\n      - key: path\n        value: /api\n        rate_limit: { unit: SECOND, requests_per_unit: 1, name: api, replaces: [{ name: other }] }\n";
        let from_yaml =
            RlsConfig::from_yaml([("edge", yaml)], crate::DuplicateDomains::Refuse).unwrap();
        assert_eq!(compile(vec![resource]).unwrap().dump(), from_yaml.dump());
    }

    #[test]
    fn the_same_checks_and_messages_naming_the_resource() {
        let no_domain = RateLimitConfig {
            name: "first".into(),
            ..RateLimitConfig::default()
        };
        assert_eq!(
            compile(vec![no_domain]).unwrap_err(),
            "first: config file cannot have empty domain"
        );
        let unknown_unit = RateLimitConfig {
            name: "second".into(),
            domain: "d".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                rate_limit: limit(RateLimitUnit::Unknown, 3),
                ..RateLimitDescriptor::default()
            }],
        };
        assert_eq!(
            compile(vec![unknown_unit]).unwrap_err(),
            "second: invalid rate limit unit 'UNKNOWN'"
        );
        let twice = |name: &str| RateLimitConfig {
            name: name.into(),
            domain: "d".into(),
            descriptors: Vec::new(),
        };
        assert_eq!(
            compile(vec![twice("a"), twice("b")]).unwrap_err(),
            "b: duplicate domain 'd' in config file"
        );
    }
}
