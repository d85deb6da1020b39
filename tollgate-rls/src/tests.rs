//! The reference's configuration rules, case by case, on the fixtures in
//! `tests/rls/fixtures`.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;

use super::config::{DuplicateDomains, RlsConfig};
use super::matching::{client_key, wildcard_match, Matched};
use tollgate::{rules::Lease, Algorithm};

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!("../tests/rls/fixtures/", $name)),
        )
    };
}

fn load(files: &[(&str, &str)]) -> RlsConfig {
    match RlsConfig::from_yaml(files.iter().copied(), DuplicateDomains::Refuse) {
        Ok(config) => config,
        Err(e) => panic!("{e}"),
    }
}

fn error(files: &[(&str, &str)], merge: DuplicateDomains) -> String {
    match RlsConfig::from_yaml(files.iter().copied(), merge) {
        Ok(_) => panic!(
            "accepted {:?}",
            files.iter().map(|f| f.0).collect::<Vec<_>>()
        ),
        Err(e) => e.to_string(),
    }
}

pub(super) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

fn get<'c>(config: &'c RlsConfig, domain: &str, entries: &[(&str, &str)]) -> Option<Matched<'c>> {
    config
        .get_limit(domain, &descriptor(entries))
        .unwrap_or_else(|()| panic!("unknown domain {domain}"))
}

/// (requests per unit, unit, stats key) of the match.
fn limit(config: &RlsConfig, domain: &str, entries: &[(&str, &str)]) -> (u32, Unit, String) {
    let m = get(config, domain, entries).unwrap_or_else(|| panic!("no limit for {entries:?}"));
    (
        m.limit.requests_per_unit,
        m.limit.unit,
        m.stats_key.into_owned(),
    )
}

#[test]
fn nested_levels_defaults_and_overrides_match_as_the_reference_does() {
    let config = load(&[fixture!("nested.yaml")]);
    let empty = RateLimitDescriptor::default();
    assert!(config.get_limit("elsewhere", &empty).is_err());
    assert!(matches!(config.get_limit("shop", &empty), Ok(None)));
    // No limit at that level, or deeper than the configuration.
    for entries in [
        &[("tenant", "other")][..],
        &[("tenant", "acme")],
        &[("user", "bob"), ("sub", "x")],
        &[("region", "eu"), ("zone", "elsewhere")],
        &[("user", "internal")],
    ] {
        assert!(get(&config, "shop", entries).is_none(), "{entries:?}");
    }
    let s = |k: &str| k.to_owned();
    assert_eq!(
        limit(&config, "shop", &[("tenant", "acme"), ("route", "search")]),
        (5, Unit::Second, s("shop.tenant_acme.route"))
    );
    assert_eq!(
        limit(
            &config,
            "shop",
            &[("tenant", "acme"), ("route", "checkout")]
        ),
        (10, Unit::Second, s("shop.tenant_acme.route_checkout"))
    );
    assert_eq!(
        limit(&config, "shop", &[("user", "bob")]),
        (20, Unit::Minute, s("shop.user"))
    );
    assert_eq!(
        limit(&config, "shop", &[("user", "vip")]),
        (30, Unit::Minute, s("shop.user_vip"))
    );
    assert_eq!(
        limit(&config, "shop", &[("ip", "10.0.0.1")]),
        (1, Unit::Hour, s("shop.ip"))
    );
    assert_eq!(
        limit(&config, "shop", &[("region", "eu"), ("zone", "eu-west")]),
        (25, Unit::Day, s("shop.region_eu.zone_eu-west"))
    );
    let named = get(&config, "shop", &[("api_key", "k1")]).unwrap();
    assert_eq!(named.limit.name, "api_key_limit");
    assert!(get(&config, "shop", &[("ip", "x")])
        .unwrap()
        .limit
        .name
        .is_empty());
    let unlimited = get(&config, "shop", &[("health", "x")]).unwrap();
    assert!(unlimited.limit.unlimited && unlimited.limit.policy.is_none());
    // detailed_metric: the statistics key carries the value.
    assert_eq!(
        limit(&config, "shop", &[("path", "/a")]),
        (70, Unit::Minute, s("shop.path_/a"))
    );
    assert_eq!(
        limit(&config, "shop", &[("path", "/b")]).2,
        "shop.path_/b".to_owned()
    );
    // Every limit is a fixed window of its unit, as the reference counts.
    let policy = get(&config, "shop", &[("user", "bob")])
        .unwrap()
        .limit
        .policy
        .clone()
        .unwrap();
    assert_eq!(policy.algorithm(), Algorithm::FixedWindow);
    assert_eq!(policy.quota().period(), Duration::from_secs(60));
    assert_eq!(policy.quota().limit(), 20);
}

#[test]
fn each_value_of_a_default_key_has_its_own_counter() {
    let config = load(&[fixture!("nested.yaml")]);
    let key = |v: &str| {
        let d = descriptor(&[("user", v)]);
        let m = config.get_limit("shop", &d).unwrap().unwrap();
        client_key("shop", &d, &m.shared)
    };
    assert_ne!(key("bob"), key("alice"));
    assert_eq!(key("bob"), "4:shop,4:user,3:bob,");
}

#[test]
fn shadow_mode_is_per_descriptor() {
    let config = load(&[fixture!("shadow.yaml")]);
    let shadow =
        |entries: &[(&str, &str)]| get(&config, "shop", entries).unwrap().limit.shadow_mode;
    assert!(!shadow(&[("tenant", "acme"), ("route", "search")]));
    assert!(shadow(&[("tenant", "acme"), ("route", "checkout")]));
    assert!(shadow(&[("user", "bob")]));
    assert!(!shadow(&[("user", "vip")]));
}

#[test]
fn wildcards_match_prefixes_middles_and_several_stars() {
    let config = load(&[fixture!("wildcard.yaml")]);
    let key = |entries: &[(&str, &str)]| limit(&config, "files", entries).2;
    assert_eq!(key(&[("any", "1")]), "files.any");
    assert_eq!(key(&[("any", "2")]), "files.any");
    assert_eq!(key(&[("prefix", "img1")]), "files.prefix_img*");
    assert_eq!(key(&[("prefix", "img")]), "files.prefix_img*");
    assert_eq!(
        key(&[("outer", "o1"), ("inner", "doc2")]),
        "files.outer_o1.inner_doc*"
    );
    assert_eq!(key(&[("middle", "abz")]), "files.middle_ab*z");
    assert_eq!(key(&[("middle", "ab123z")]), "files.middle_ab*z");
    assert_eq!(key(&[("several", "a1b2c")]), "files.several_a*b*c");
    assert_eq!(key(&[("several", "abc")]), "files.several_a*b*c");
    for entries in [
        &[("prefix", "bar")][..],
        &[("exact", "img1")],
        &[("middle", "aba")],
        &[("middle", "xabz")],
        &[("several", "a1c")],
        &[("several", "b1c")],
    ] {
        assert!(get(&config, "files", entries).is_none(), "{entries:?}");
    }
}

#[test]
fn share_threshold_counts_every_value_of_a_wildcard_together() {
    let config = load(&[fixture!("wildcard.yaml")]);
    let key = |k: &str, v: &str| {
        let d = descriptor(&[(k, v)]);
        let m = config.get_limit("files", &d).unwrap().unwrap();
        client_key("files", &d, &m.shared)
    };
    assert_eq!(key("shared", "pub/a.pdf"), key("shared", "pub/b.csv"));
    assert_eq!(key("shared", "pub/a.pdf"), "5:files,6:shared,5:pub/*,");
    assert_ne!(key("own", "pub/a.pdf"), key("own", "pub/b.csv"));
}

#[test]
fn wildcard_match_is_the_references() {
    let parts = |p: &str| p.split('*').map(str::to_owned).collect::<Vec<_>>();
    assert!(wildcard_match(&parts("k_foo*"), "k_foo"));
    assert!(wildcard_match(&parts("k_foo*"), "k_foobar"));
    assert!(!wildcard_match(&parts("k_foo*"), "k_fo"));
    assert!(wildcard_match(&parts("bar*b"), "barb"));
    assert!(!wildcard_match(&parts("ba*ab"), "bab"));
    assert!(wildcard_match(&parts("a**b"), "ab"));
    assert!(wildcard_match(&parts("exact"), "exact"));
    assert!(!wildcard_match(&parts("exact"), "exactly"));
}

#[test]
fn domains_merge_only_when_asked() {
    let files = [fixture!("merge_a.yaml"), fixture!("merge_b.yaml")];
    let merged = RlsConfig::from_yaml(files, DuplicateDomains::Merge).unwrap();
    assert_eq!(limit(&merged, "merged", &[("first", "one")]).0, 10);
    assert_eq!(limit(&merged, "merged", &[("second", "two")]).0, 20);
    assert_eq!(
        error(&files, DuplicateDomains::Refuse),
        "merge_b.yaml: duplicate domain 'merged' in config file"
    );
    assert_eq!(
        error(
            &[fixture!("merge_a.yaml"), fixture!("merge_a.yaml")],
            DuplicateDomains::Merge
        ),
        "merge_a.yaml: duplicate descriptor composite key 'merged.first_one'"
    );
}

#[test]
fn every_file_the_reference_rejects_is_rejected_with_its_message() {
    let cases = [
        (
            fixture!("empty_domain.yaml"),
            "config file cannot have empty domain",
        ),
        (fixture!("empty_key.yaml"), "descriptor has empty key"),
        (
            fixture!("duplicate_key.yaml"),
            "duplicate descriptor composite key 'shop.user_bob'",
        ),
        (
            fixture!("bad_unit.yaml"),
            "invalid rate limit unit 'fortnight'",
        ),
        (
            fixture!("replaces_self.yaml"),
            "replaces should not contain name of same descriptor",
        ),
        (
            fixture!("replaces_empty.yaml"),
            "should not have an empty replaces entry",
        ),
        (
            fixture!("misspelled_key.yaml"),
            "config error, unknown key 'ratelimit'",
        ),
        (
            fixture!("misspelled_key2.yaml"),
            "config error, unknown key 'requestsperunit'",
        ),
        (
            fixture!("non_string_key.yaml"),
            "config error, key is not of type string: 0.5",
        ),
        (
            fixture!("non_map_list.yaml"),
            "config error, yaml file contains list of type other than map: x",
        ),
        (
            fixture!("unlimited_with_unit.yaml"),
            "should not specify rate limit unit when unlimited",
        ),
        (
            fixture!("share_threshold_without_wildcard.yaml"),
            "share_threshold can only be used with wildcard values (containing '*'), but found \
             key 'user_bob'",
        ),
        (fixture!("float_leaf.yaml"), "error checking config"),
    ];
    for ((name, content), why) in cases {
        assert_eq!(
            error(&[(name, content)], DuplicateDomains::Refuse),
            format!("{name}: {why}")
        );
    }
    let e = error(&[fixture!("bad_yaml.yaml")], DuplicateDomains::Refuse);
    assert!(
        e.starts_with("bad_yaml.yaml: error loading config file: "),
        "{e}"
    );
    assert_eq!(
        error(
            &[fixture!("nested.yaml"), fixture!("duplicate_domain.yaml")],
            DuplicateDomains::Refuse
        ),
        "duplicate_domain.yaml: duplicate domain 'shop' in config file"
    );
}

#[test]
fn extensions_pick_the_algorithm_burst_lease_and_window() {
    let config = load(&[fixture!("extensions.yaml")]);
    let policy = |k: &str| {
        let m = get(&config, "ext", &[(k, "v")]).unwrap();
        m.limit.policy.clone()
    };
    let smooth = policy("smooth").unwrap();
    assert_eq!(smooth.algorithm(), Algorithm::Gcra);
    assert_eq!(smooth.quota().capacity(), 20);
    assert_eq!(
        policy("sliding").unwrap().algorithm(),
        Algorithm::SlidingWindow
    );
    assert_eq!(policy("hot").unwrap().lease(), Some(Lease::Auto));
    let fortnight = policy("fortnight").unwrap();
    assert_eq!(
        fortnight.quota().period(),
        Duration::from_secs(14 * 24 * 3600)
    );
    assert_eq!(fortnight.name(), "rls.1209600s");
    // Nothing allowed: no store needed.
    let nothing = get(&config, "ext", &[("nothing", "v")]).unwrap();
    assert_eq!(nothing.limit.requests_per_unit, 0);
    assert!(nothing.limit.policy.is_none());

    let e = error(&[fixture!("bad_algorithm.yaml")], DuplicateDomains::Refuse);
    assert!(
        e.starts_with(
            "bad_algorithm.yaml: descriptor 'shop.user': unknown algorithm \"leaky_window\""
        ),
        "{e}"
    );
    let e = error(
        &[fixture!("burst_on_window.yaml")],
        DuplicateDomains::Refuse,
    );
    assert!(e.contains("burst is not used by fixed_window"), "{e}");
    let zero = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, \
                requests_per_unit: 1, unit_multiplier: 0}\n";
    assert!(error(&[("zero.yaml", zero)], DuplicateDomains::Refuse)
        .contains("unit_multiplier must be at least 1"));
}

#[test]
fn scalars_read_as_the_reference_reads_them() {
    let yaml = "domain: d\ndescriptors:\n  - key: code\n    value: 404\n    shadow_mode: yes\n    \
                rate_limit: {unit: MINUTE, requests_per_unit: 3}\n";
    let config = load(&[("scalars.yaml", yaml)]);
    let m = get(&config, "d", &[("code", "404")]).unwrap();
    assert!(m.limit.shadow_mode);
    assert_eq!(m.limit.unit, Unit::Minute);
    let empty = load(&[("empty.yaml", "domain: d\n")]);
    assert!(matches!(
        empty.get_limit("d", &descriptor(&[("a", "b")])),
        Ok(None)
    ));
}

#[test]
fn dump_lists_every_limit_sorted() {
    let config = load(&[fixture!("merge_a.yaml"), fixture!("extensions.yaml")]);
    let dump = config.dump();
    assert!(dump.starts_with(
        "ext.fortnight: unit=WEEK requests_per_unit=5, shadow_mode: false, quota_mode: false\n"
    ));
    assert!(dump.contains(
        "ext.smooth: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, \
         algorithm: gcra\n"
    ));
    assert!(dump.ends_with(
        "merged.first_one: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: \
         false\n"
    ));
}

/// The reference reads text fields with gopkg.in/yaml.v2 into Go strings
/// (`src/config/config_impl.go`, `YamlDescriptor.Value string`), which keep a scalar as
/// written: `0x1F` is `0x1F`, not 31.
#[test]
fn scalars_are_kept_as_written() {
    let yaml = "domain: d\ndescriptors:\n  - key: code\n    value: 0x1F\n    \
                rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: flag\n    \
                value: True\n    rate_limit: {unit: minute, requests_per_unit: 4}\n  - key: \
                octal\n    value: 007\n    rate_limit: {unit: minute, requests_per_unit: 5, \
                name: 0x10}\n  - key: plus\n    value: +5\n    rate_limit: {unit: minute, \
                requests_per_unit: 6}\n";
    let config = load(&[("scalars.yaml", yaml)]);
    assert_eq!(limit(&config, "d", &[("code", "0x1F")]).2, "d.code_0x1F");
    assert!(get(&config, "d", &[("code", "31")]).is_none());
    assert_eq!(limit(&config, "d", &[("flag", "True")]).0, 4);
    assert!(get(&config, "d", &[("flag", "true")]).is_none());
    let octal = get(&config, "d", &[("octal", "007")]).unwrap();
    assert_eq!(octal.limit.name, "0x10");
    assert_eq!(limit(&config, "d", &[("plus", "+5")]).0, 6);
    // And in the errors, as the reference prints them.
    let bad = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: 0x1F}\n";
    assert_eq!(
        error(&[("bad.yaml", bad)], DuplicateDomains::Refuse),
        "bad.yaml: invalid rate limit unit '0x1F'"
    );
}

/// The reference's detailed statistics key writes every entry as `key + "_" + value`, an
/// empty value too (`src/config/config_impl.go`, `GetLimit`: `finalKey := entry.Key + "_" +
/// entry.Value` then `detailedMetricFullKey.WriteString(finalKey)`), while Envoy's own limits
/// are named by `descriptorKey`, which drops the `_` of an empty value.
#[test]
fn detailed_keys_are_built_as_the_reference_builds_them() {
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    \
                rate_limit: {unit: second, requests_per_unit: 5}\n    descriptors:\n      - key: \
                sub\n        detailed_metric: true\n        rate_limit: {unit: second, \
                requests_per_unit: 6}\n";
    let config = load(&[("detailed.yaml", yaml)]);
    assert_eq!(limit(&config, "d", &[("k", "")]).2, "d.k_");
    assert_eq!(limit(&config, "d", &[("k", "v")]).2, "d.k_v");
    assert_eq!(
        limit(&config, "d", &[("k", ""), ("sub", "")]).2,
        "d.k_.sub_"
    );
    assert_eq!(
        super::matching::override_key("d", &descriptor(&[("k", ""), ("sub", "x")])),
        "d.k.sub_x"
    );
}

/// The reference takes any `uint32` per any unit (`YamlRateLimit.RequestsPerUnit uint32` in
/// `src/config/config_impl.go`; `src/limiter/base_limiter.go` compares the counter with
/// `uint64(RequestsPerUnit)`, whatever the unit): an "effectively unlimited" limit is
/// accepted, and a fixed window counts it exactly. The bucket algorithms space requests at
/// least 1 µs apart, their burst kept.
#[test]
fn any_u32_per_any_unit_is_accepted() {
    let yaml = |n: u64, unit: &str, extra: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: {unit}, \
             requests_per_unit: {n}{extra}}}\n"
        )
    };
    for unit in ["second", "minute", "hour", "day", "week", "month", "year"] {
        for n in [1_000_000_000, u64::from(u32::MAX)] {
            let text = yaml(n, unit, "");
            let config = load(&[("big.yaml", &text)]);
            let m = get(&config, "d", &[("k", "v")]).unwrap();
            let policy = m.limit.policy.as_ref().unwrap();
            assert_eq!(u64::from(policy.quota().limit()), n, "{unit}");
        }
    }
    let text = yaml(u64::from(u32::MAX), "second", ", algorithm: gcra, burst: 7");
    let config = load(&[("gcra.yaml", &text)]);
    let m = get(&config, "d", &[("k", "v")]).unwrap();
    // How the algorithms space such a quota is `Quota::any_rate`'s (tested there).
    let quota = *m.limit.policy.as_ref().unwrap().quota();
    assert_eq!((quota.limit(), quota.burst_setting()), (u32::MAX, Some(7)));
    // One more than a u32 is refused, as the reference refuses it (no uint32 holds it).
    let text = yaml(u64::from(u32::MAX) + 1, "second", "");
    assert!(error(&[("over.yaml", &text)], DuplicateDomains::Refuse)
        .contains("requests_per_unit must be a whole number"));
}
