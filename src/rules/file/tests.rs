//! The rules file: what parses, and every error with its position, rule, field and what is
//! allowed.

use super::*;
use crate::rules::{CompiledRule, StatusMatch};
use http::request::Parts;
use proptest::prelude::*;
use std::time::Duration;

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
    parse(source, "rules.toml", &NamedLookups::default())
        .unwrap_err()
        .to_string()
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
    let file = parse(EXAMPLE, "rules.toml", &NamedLookups::default()).unwrap();
    let names: Vec<_> = file.rules.iter().map(Rule::name).collect();
    assert_eq!(names, ["login", "api"]);

    assert_eq!(file.skips.len(), 1);
    assert!(file.skips[0].matches(&parts("GET", "/health")));
    assert!(file.skips[0].matches(&parts("POST", "/health")));
    assert!(!file.skips[0].matches(&parts("GET", "/healthz")));

    let login = compile(&file.rules[0]);
    assert!(login.route.matches(&parts("POST", "/login")));
    assert!(!login.route.matches(&parts("GET", "/login")));
    assert_eq!(login.quota, Quota::per_minute(5).unwrap());
    assert_eq!(login.policy.algorithm(), Algorithm::Gcra);
    assert_eq!(login.key.describe(), key::PeerIp::default().describe());
    assert_eq!(login.mode, Mode::Enforce);

    let api = compile(&file.rules[1]);
    assert!(api.route.matches(&parts("GET", "/api/items")));
    assert!(api.route.matches(&parts("DELETE", "/api")));
    assert!(!api.route.matches(&parts("GET", "/apix")));
    assert_eq!(
        api.quota,
        Quota::per_second(100).unwrap().burst(200).unwrap()
    );
    assert_eq!(api.key.describe(), "the x-api-key header");
    assert_eq!(api.mode, Mode::Enforce);
    assert_eq!(api.max_cost, 200);
    assert!(matches!(&api.cost, super::super::Cost::Header(h) if h == "x-cost"));
    let debug = format!("{:?}", file.rules[1]);
    // "delay mode only": ignored on this enforce rule.
    assert!(debug.contains("max_delay: None"), "{debug}");
    assert!(debug.contains("algorithm: Some(Gcra)"), "{debug}");
}

#[test]
fn without_defaults_gcra_and_peer_ip() {
    let file = parse(
        "[[rule]]\nname = \"all\"\nquota = \"10/s\"\n",
        "rules.toml",
        &NamedLookups::default(),
    )
    .unwrap();
    assert!(file.skips.is_empty());
    let all = compile(&file.rules[0]);
    assert_eq!(all.policy.algorithm(), Algorithm::Gcra);
    assert_eq!(all.key.describe(), key::PeerIp::default().describe());
    assert!(all.route.matches(&parts("PUT", "/anything")));
    assert_eq!(all.max_cost, 10);
}

#[test]
fn an_empty_file_has_no_rules() {
    let file = parse("# nothing yet\n", "rules.toml", &NamedLookups::default()).unwrap();
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
    let file = parse(source, "rules.toml", &NamedLookups::default()).unwrap();
    let inherits = compile(&file.rules[0]);
    assert_eq!(inherits.policy.algorithm(), Algorithm::TokenBucket);
    assert_eq!(inherits.quota, Quota::per_second(10).unwrap());
    assert_eq!(inherits.max_cost, 5);
    assert_eq!(inherits.mode, Mode::Shadow);
    assert!(matches!(&inherits.cost, super::super::Cost::Header(h) if h == "x-cost"));
    assert_eq!(inherits.key.describe(), key::ClientIp::default().describe());
    // max_delay from [defaults] applies only to delay-mode rules.
    assert!(format!("{:?}", file.rules[0]).contains("max_delay: None"));

    let overrides = compile(&file.rules[1]);
    assert_eq!(overrides.policy.algorithm(), Algorithm::SlidingWindow);
    assert_eq!(overrides.quota, Quota::per_minute(7).unwrap());
    assert_eq!(overrides.max_cost, 3);
    assert_eq!(overrides.mode, Mode::Enforce);
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
    assert_eq!(queued.mode, Mode::Delay);
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
        &NamedLookups::default(),
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
    let e =
        error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nkey = \"header:x-api-key or cookie\"\n");
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
    let e =
        error("[[rule]]\nname = \"w\"\nquota = \"10/s; burst=20\"\nalgorithm = \"fixed_window\"\n");
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
        let file = parse(source, "rules.toml", &NamedLookups::default()).unwrap();
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
    let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmethods = [\"GET\", \"PO ST\"]\n");
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
    let e =
        error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n");
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
    let e = error(
        "[[rule]]\nname = \"api\"\nquota = \"1/s\"\n\n[[rule]]\nname = \"api\"\nquota = \"2/s\"\n",
    );
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
    let e = parse("x = 1", "/etc/app/limits.toml", &NamedLookups::default())
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
        let _ = parse(&text, "rules.toml", &NamedLookups::default());
    }

    #[test]
    fn parse_never_panics_on_rules_like_text(lines in prop::collection::vec(fragment(), 0..16)) {
        let text = lines.join("\n");
        if let Err(e) = parse(&text, "rules.toml", &NamedLookups::default()) {
            prop_assert!(e.to_string().starts_with("rules.toml:"), "{}", e);
        }
    }
}

#[test]
fn block_for_from_the_rule_or_the_defaults() {
    let file = parse(
        "[defaults]\nblock_for = \"15m\"\n\n[[rule]]\nname = \"login\"\nquota = \"5/min\"\n\n\
         [[rule]]\nname = \"api\"\nquota = \"10/s\"\nblock_for = \"30s\"\n",
        "rules.toml",
        &NamedLookups::default(),
    )
    .unwrap();
    let shown: Vec<String> = file.rules.iter().map(|r| format!("{r:?}")).collect();
    assert!(shown[0].contains("block_for: Some(900s)"), "{}", shown[0]);
    assert!(shown[1].contains("block_for: Some(30s)"), "{}", shown[1]);
    let unused: Arc<dyn KeyExtractor> = Arc::new(key::Global);
    let login = file.rules[0].compile(&unused, Algorithm::Gcra).unwrap();
    assert_eq!(
        login.policy.block_for(),
        Some(std::time::Duration::from_secs(900))
    );
    // A shadow rule never blocks.
    let file = parse(
        "[[rule]]\nname = \"api\"\nquota = \"1/s\"\nmode = \"shadow\"\nblock_for = \"1m\"\n",
        "rules.toml",
        &NamedLookups::default(),
    )
    .unwrap();
    let api = file.rules[0].compile(&unused, Algorithm::Gcra).unwrap();
    assert_eq!(api.policy.block_for(), None);
}

#[test]
fn bad_block_for() {
    let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nblock_for = \"10 fortnights\"\n");
    assert_error(
        &e,
        "4:13",
        &[
            "rule \"api\": block_for: ",
            "invalid duration \"10 fortnights\"",
            "us, ms, s, min, h or day",
        ],
    );
    let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nblock_for = 600\n");
    assert_error(&e, "4:13", &["rule \"api\": block_for: "]);
    let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nblock_for = \"400d\"\n");
    assert_error(
        &e,
        "4:13",
        &["rule \"api\": block_for: ", "out of range", "365 days"],
    );
    // Delay mode refuses it, pointing at the block_for the rule takes (its own or the default).
    let e = error(
        "[[rule]]\nname = \"export\"\nquota = \"2/s\"\nmode = \"delay\"\nmax_delay = \"1s\"\n\
         block_for = \"1m\"\n",
    );
    assert_error(
        &e,
        "6:13",
        &[
            "rule \"export\": block_for: ",
            "cannot be used in delay mode",
        ],
    );
    let e = error(
        "[defaults]\nblock_for = \"1m\"\n[[rule]]\nname = \"export\"\nquota = \"2/s\"\n\
         mode = \"delay\"\nmax_delay = \"1s\"\n",
    );
    assert_error(
        &e,
        "2:13",
        &[
            "rule \"export\": block_for: ",
            "cannot be used in delay mode",
        ],
    );
}

#[test]
fn count_status_takes_codes_classes_and_lists_mixing_them() {
    let file = parse(
        r#"
[[rule]]
name = "signin"
quota = "3/min"
count_status = [401, 403]

[[rule]]
name = "errors"
quota = "3/min"
count_status = "5xx"

[[rule]]
name = "mixed"
quota = "3/min"
count_status = [429, "4xx", "5XX"]

[[rule]]
name = "one"
quota = "3/min"
count_status = 401

[[rule]]
name = "every"
quota = "3/min"
"#,
        "rules.toml",
        &NamedLookups::default(),
    )
    .unwrap();
    let statuses: Vec<Option<Vec<StatusMatch>>> = file
        .rules
        .iter()
        .map(|r| compile(r).count_status.map(|s| s.to_vec()))
        .collect();
    assert_eq!(
        statuses,
        [
            Some(vec![StatusMatch::Code(401), StatusMatch::Code(403)]),
            Some(vec![StatusMatch::class(5)]),
            Some(vec![
                StatusMatch::Code(429),
                StatusMatch::class(4),
                StatusMatch::class(5)
            ]),
            Some(vec![StatusMatch::Code(401)]),
            None,
        ]
    );
}

#[test]
fn bad_count_status() {
    let rule = "[[rule]]\nname = \"signin\"\nquota = \"3/min\"\n";
    let e = error(&format!("{rule}count_status = [401, 99]\n"));
    assert_error(
        &e,
        "4:22",
        &[
            "rule \"signin\": count_status: ",
            "99 is not an HTTP status (use codes from 100 to 599 and classes \"1xx\" to \"5xx\"",
        ],
    );
    let e = error(&format!("{rule}count_status = \"6xx\"\n"));
    assert_error(
        &e,
        "4:16",
        &[
            "rule \"signin\": count_status: ",
            "\"6xx\" is not an HTTP status",
        ],
    );
    let e = error(&format!("{rule}count_status = [\"4xx\", \"teapot\"]\n"));
    assert_error(
        &e,
        "4:24",
        &[
            "rule \"signin\": count_status: ",
            "\"teapot\" is not a status code or class",
        ],
    );
    let e = error(&format!("{rule}count_status = []\n"));
    assert_error(
        &e,
        "4:16",
        &["rule \"signin\": count_status: ", "empty list"],
    );
    let e = error(&format!("{rule}count_status = [[401]]\n"));
    assert_error(&e, "4:17", &["rule \"signin\": count_status: "]);
    let e = error(&format!(
        "{rule}mode = \"delay\"\nmax_delay = \"1s\"\ncount_status = [401]\n"
    ));
    assert_error(
        &e,
        "6:16",
        &[
            "rule \"signin\": count_status: ",
            "cannot be used in delay mode: delay mode takes a request's place in the queue \
             before the handler runs",
        ],
    );
    // Only on a rule.
    let e = error("[defaults]\ncount_status = [401]\n");
    assert_error(&e, "2:1", &["defaults: ", "unknown field `count_status`"]);
}

#[test]
fn lease_is_auto_or_a_number_and_bad_values_point_at_it() {
    let file = parse(
        "[[rule]]\nname = \"global\"\nquota = \"20000/s\"\nkey = \"global\"\nlease = \"auto\"\n\
         [[rule]]\nname = \"partner\"\nquota = \"500/s\"\nlease = 25\n",
        "rules.toml",
        &NamedLookups::default(),
    )
    .unwrap();
    assert_eq!(
        compile(&file.rules[0]).policy.lease(),
        Some(crate::rules::Lease::Auto)
    );
    assert_eq!(
        compile(&file.rules[1]).policy.lease(),
        Some(crate::rules::Lease::tokens(25))
    );

    let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nlease = \"lots\"\n");
    assert_error(
        &e,
        "4:9",
        &[
            "rule \"api\": lease: ",
            "invalid lease \"lots\"",
            "\"auto\"",
        ],
    );
    let e = error("[[rule]]\nname = \"api\"\nquota = \"1/s\"\nlease = 0\n");
    assert_error(
        &e,
        "4:9",
        &["rule \"api\": lease: ", "lease 0 is out of range"],
    );
    let e = error("[[rule]]\nname = \"api\"\nquota = \"10/s\"\nlease = 11\n");
    assert_error(
        &e,
        "4:9",
        &[
            "rule \"api\": lease: ",
            "more than the quota's capacity of 10",
        ],
    );
    let e = error(
        "[[rule]]\nname = \"api\"\nquota = \"10/s\"\nalgorithm = \"sliding_window\"\nlease = 5\n",
    );
    assert_error(
        &e,
        "5:9",
        &[
            "rule \"api\": lease: ",
            "lease does not work with sliding_window",
            "leases work with gcra, token_bucket, leaky_bucket, fixed_window, fixed_window_from_first",
        ],
    );
    let e =
        error("[[rule]]\nname = \"api\"\nquota = \"10/s\"\nmode = \"delay\"\nlease = \"auto\"\n");
    assert_error(
        &e,
        "5:9",
        &["rule \"api\": lease: ", "lease does not work in delay mode"],
    );
    let e =
        error("[[rule]]\nname = \"signin\"\nquota = \"10/s\"\ncount_status = [401]\nlease = 5\n");
    assert_error(
        &e,
        "5:9",
        &[
            "rule \"signin\": lease: ",
            "lease does not work with count_status",
        ],
    );
    let e = error("[[rule]]\nname = \"api\"\nquota = \"10/s\"\nblock_for = \"1m\"\nlease = 5\n");
    assert_error(
        &e,
        "5:9",
        &[
            "rule \"api\": lease: ",
            "lease does not work with block_for",
        ],
    );
}

#[test]
fn in_flight_makes_a_rule_a_limit_on_requests_in_flight() {
    let source = r#"
[defaults]
quota = "10/s"
algorithm = "fixed_window"
cost_header = "x-cost"
block_for = "1m"
in_flight_ttl = "2s"

[[rule]]
name = "slow"
path = "/slow"
in_flight = 3

[[rule]]
name = "queue"
in_flight = 1
in_flight_ttl = "500ms"
mode = "delay"
max_delay = "1s"

[[rule]]
name = "rate"
"#;
    let file = parse(source, "rules.toml", &NamedLookups::default()).unwrap();
    let slow = compile(&file.rules[0]);
    let limit = &slow.in_flight.as_ref().unwrap().limit;
    // The rate settings of [defaults] do not apply to it.
    assert_eq!((limit.max(), limit.ttl()), (3, Duration::from_secs(2)));
    assert_eq!(slow.in_flight.as_ref().unwrap().max_wait, Duration::ZERO);
    assert_eq!(slow.header_item, "\"slow\";q=3;qu=\"concurrent-requests\"");
    assert!(slow.route.matches(&parts("GET", "/slow")));
    let queue = compile(&file.rules[1]);
    let queue = queue.in_flight.as_ref().unwrap();
    assert_eq!(queue.limit.ttl(), Duration::from_millis(500));
    assert_eq!(queue.max_wait, Duration::from_secs(1));
    let rate = compile(&file.rules[2]);
    assert!(rate.in_flight.is_none());
    assert_eq!(rate.policy.algorithm(), Algorithm::FixedWindow);
}

#[test]
fn a_limit_on_requests_in_flight_refuses_rate_settings_where_they_are() {
    let e = error("[[rule]]\nname = \"a\"\nin_flight = 2\nquota = \"1/s\"\n");
    assert_error(&e, "4:9", &["rule \"a\"", "quota", "applies to a rate"]);
    let e = error("[[rule]]\nname = \"a\"\nin_flight = 2\ncost_header = \"x-cost\"\n");
    assert_error(&e, "3:13", &["rule \"a\"", "cost_header applies to a rate"]);
    let e = error("[[rule]]\nname = \"a\"\nin_flight = 2\nquota_from = \"plan\"\n");
    assert_error(&e, "4:14", &["rule \"a\"", "quota_from applies to a rate"]);
    let e = error("[[rule]]\nname = \"a\"\nin_flight = 2\noverridable = true\n");
    assert_error(&e, "3:13", &["rule \"a\"", "overridable applies to a rate"]);
    let e = error("[[rule]]\nname = \"a\"\nin_flight = 0\n");
    assert_error(&e, "3:13", &["in_flight 0 is out of range"]);
    let e = error("[[rule]]\nname = \"a\"\nin_flight = 2\nin_flight_ttl = \"10ms\"\n");
    assert_error(&e, "4:17", &["in_flight_ttl", "out of range"]);
    let e = error("[[rule]]\nname = \"a\"\nquota = \"1/s\"\nin_flight_ttl = \"1s\"\n");
    assert_error(&e, "4:17", &["in_flight_ttl applies only"]);
    let e = error("[[rule]]\nname = \"a\"\nin_flight = 2\nmode = \"delay\"\n");
    assert_error(&e, "4:8", &["mode", "needs max_delay"]);
    let e = error("[[rule]]\nname = \"a\"\n");
    assert_error(&e, "1:1", &["quota", "in_flight = 4"]);
}

#[test]
fn a_cost_from_the_response_is_read_with_its_estimate() {
    let source = "[[rule]]\nname = \"tokens\"\nquota = \"1000/min\"\nresponse_cost = { header = \
                  \"x-usage\", estimate_header = \"x-estimate\", estimate = 100, unknown = \"zero\" }\n";
    let file = parse(source, "rules.toml", &NamedLookups::default()).unwrap();
    let rule = compile(&file.rules[0]);
    assert!(rule.priced.is_some());
    // The estimate is the request's cost at admission: its header, else 100.
    assert_eq!(rule.cost.of(&parts("GET", "/"), rule.max_cost), Ok(100));
    let e = error("[[rule]]\nname = \"t\"\nquota = \"1/s\"\nresponse_cost = { header = \"x\", unknown = \"none\" }\n");
    assert_error(&e, "4:43", &["rule \"t\"", "unknown \"none\"", "\"zero\""]);
    let e = error("[[rule]]\nname = \"t\"\nquota = \"1/s\"\nresponse_cost = { estimate = 0, header = \"x\" }\n");
    assert_error(&e, "4:30", &["estimate 0 is out of range"]);
    let e = error("[[rule]]\nname = \"t\"\nquota = \"1/s\"\ncount_status = [500]\nresponse_cost = { header = \"x\" }\n");
    assert_error(
        &e,
        "5:17",
        &["response_cost", "does not work with count_status"],
    );
    let e = error("[[rule]]\nname = \"t\"\nin_flight = 2\nresponse_cost = { header = \"x\" }\n");
    assert_error(&e, "4:17", &["response_cost applies to a rate"]);
}
