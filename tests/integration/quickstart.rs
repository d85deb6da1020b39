//! The quickstart example as a new user runs it: choosing its store from the environment.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use support::{RedisCluster, RedisSentinel, SecureRedis};

/// The quickstart binary, which `cargo test` builds next to the test binaries (a filtered
/// `cargo test --test integration quickstart::` does not: `cargo build --example quickstart` first).
fn quickstart() -> Command {
    let deps = std::env::current_exe().expect("test binary path");
    let path: PathBuf = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory")
        .join("examples")
        .join("quickstart");
    let mut command = Command::new(path);
    for name in [
        "REDIS_URL",
        "REDIS_CLUSTER_NODES",
        "REDIS_SENTINEL",
        "RULES_FILE",
        "ADMIN_TOKEN",
        "HEADERS",
    ] {
        command.env_remove(name);
    }
    command.env("RUST_LOG", "warn");
    command
}

/// A running quickstart, killed when dropped.
struct Running(Child, u16);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the quickstart with `vars` and waits for its `listening on` line.
fn start(vars: &[(&str, &str)]) -> Running {
    let port = support::free_port();
    let mut child = quickstart()
        .env("PORT", port.to_string())
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("quickstart");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("a line");
    assert!(line.starts_with("listening on"), "{line}");
    Running(child, port)
}

#[test]
fn two_redis_variables_are_an_error_at_start_up() {
    let output = quickstart()
        .env("REDIS_URL", "redis://:pw-secret@127.0.0.1:1")
        .env("REDIS_CLUSTER_NODES", "redis://127.0.0.1:2")
        .output()
        .expect("quickstart");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim(),
        "error: REDIS_URL and REDIS_CLUSTER_NODES are set: set only one of them"
    );
}

#[tokio::test]
async fn headers_chooses_which_rate_limit_headers_responses_carry() {
    for (style, ietf, legacy) in [
        ("ietf", true, false),
        ("legacy", false, true),
        ("both", true, true),
        ("none", false, false),
    ] {
        let running = start(&[("RATE_LIMIT", "5/min"), ("HEADERS", style)]);
        let r = get_root(&running, "alice").await;
        assert_eq!(r.status(), 200, "{style}");
        let h = r.headers();
        let remaining = |name: &str| h.get(name).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(
            remaining("ratelimit"),
            ietf.then(|| "\"quickstart\";r=4;t=12".to_owned()),
            "{style}"
        );
        assert_eq!(
            remaining("x-ratelimit-remaining"),
            legacy.then(|| "4".to_owned()),
            "{style}"
        );
    }
    let output = quickstart()
        .env("HEADERS", "x-ratelimit")
        .output()
        .expect("quickstart");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("HEADERS") && stderr.contains("use ietf, legacy, both or none"),
        "{stderr}"
    );
}

/// `GET /` as the client `key`.
async fn get_root(running: &Running, key: &str) -> reqwest::Response {
    support::client()
        .get(format!("http://127.0.0.1:{}/", running.1))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap()
}

/// Six requests of alice: the statuses, each asserted to be decided by the store.
async fn six_statuses(running: &Running) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let r = get_root(running, "alice").await;
        assert!(
            r.headers().contains_key("ratelimit"),
            "decided by the store"
        );
        statuses.push(r.status().as_u16());
    }
    statuses
}

#[tokio::test]
async fn the_quickstart_limits_exactly_over_tls_with_a_password() {
    let redis = SecureRedis::start();
    let url = format!("rediss://:s3cret-pw@127.0.0.1:{}/#insecure", redis.tls_port);
    let running = start(&[("REDIS_URL", &url), ("RATE_LIMIT", "5/min")]);
    assert_eq!(six_statuses(&running).await, [200, 200, 200, 200, 200, 429]);
    let key = "tollgate:quickstart:gcra:{alice}";
    let exists = support::redis_cli(
        redis.plain_port,
        &["-a", "s3cret-pw", "--no-auth-warning", "exists", key],
    );
    assert_eq!(exists.trim(), "1");
}

#[tokio::test]
async fn the_quickstart_limits_exactly_through_sentinel() {
    let redis = RedisSentinel::start();
    let running = start(&[
        ("REDIS_SENTINEL", &redis.sentinel_url()),
        ("REDIS_SENTINEL_MASTER", RedisSentinel::MASTER_NAME),
        ("RATE_LIMIT", "5/min"),
    ]);
    assert_eq!(six_statuses(&running).await, [200, 200, 200, 200, 200, 429]);
    let key = "tollgate:quickstart:gcra:{alice}";
    assert_eq!(
        support::redis_cli(redis.master_port, &["exists", key]).trim(),
        "1"
    );
}

#[tokio::test]
async fn the_quickstart_limits_exactly_through_a_cluster() {
    let cluster = RedisCluster::start();
    let nodes = cluster.urls()[..2].join(",");
    let running = start(&[("REDIS_CLUSTER_NODES", &nodes), ("RATE_LIMIT", "5/min")]);
    assert_eq!(six_statuses(&running).await, [200, 200, 200, 200, 200, 429]);
    // The state is in the cluster, under the quickstart's policy.
    let key = "tollgate:quickstart:gcra:{alice}";
    let master = cluster.master_of(key);
    assert_eq!(support::redis_cli(master, &["exists", key]).trim(), "1");
}

/// `n` GET requests of client `key`: their statuses.
async fn statuses_of(running: &Running, key: &str, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for _ in 0..n {
        let r = get_root(running, key).await;
        statuses.push(r.status().as_u16());
    }
    statuses
}

/// `DELETE /admin/limits/{path}` with this `authorization` header (if any): status, the
/// `www-authenticate` header (or "-"), whether it had rate-limit headers, and the body.
async fn admin_delete(
    running: &Running,
    path: &str,
    authorization: Option<&str>,
) -> (u16, String, bool, String) {
    let mut request = support::client().delete(format!(
        "http://127.0.0.1:{}/admin/limits/{path}",
        running.1
    ));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map_or("-".to_owned(), |v| v.to_str().unwrap().to_owned());
    let limited = r.headers().contains_key("ratelimit");
    (status, challenge, limited, r.text().await.unwrap())
}

/// The admin endpoint: only with the token (401 otherwise, whatever else is sent), 404 for
/// an unknown rule, 204 and a whole quota again for the client, never rate limited.
async fn the_admin_endpoint_resets_one_client(store: &[(&str, &str)]) {
    let token = "t0ken-with-enough-entropy";
    let mut vars = vec![("ADMIN_TOKEN", token), ("RATE_LIMIT", "5/min")];
    vars.extend_from_slice(store);
    let running = start(&vars);
    let client = support::unique_prefix("admin-client");
    assert_eq!(
        statuses_of(&running, &client, 6).await,
        [200, 200, 200, 200, 200, 429]
    );

    let path = format!("quickstart/{client}");
    let unauthorized = (
        401,
        "Bearer".to_owned(),
        false,
        "Unauthorized: send authorization: Bearer <ADMIN_TOKEN>\n".to_owned(),
    );
    for wrong in [
        None,
        Some("Bearer"),
        Some("Bearer "),
        Some("Bearer t0ken"),
        Some("Bearer t0ken-with-enough-entropy2"),
        Some("bearer t0ken-with-enough-entropy"),
        Some("Basic dDBrZW4td2l0aC1lbm91Z2gtZW50cm9weQ=="),
        Some("t0ken-with-enough-entropy"),
    ] {
        assert_eq!(
            admin_delete(&running, &path, wrong).await,
            unauthorized,
            "{wrong:?}"
        );
    }
    // Still denied: nothing was reset.
    assert_eq!(statuses_of(&running, &client, 1).await, [429]);

    let bearer = format!("Bearer {token}");
    assert_eq!(
        admin_delete(&running, &format!("nope/{client}"), Some(&bearer)).await,
        (
            404,
            "-".to_owned(),
            false,
            "no rule named \"nope\" (the rules in force are: quickstart, signin)\n".to_owned()
        )
    );
    // Ten admin calls in a row, more than the quota: none is limited.
    for _ in 0..10 {
        assert_eq!(
            admin_delete(&running, &path, Some(&bearer)).await,
            (204, "-".to_owned(), false, String::new())
        );
    }
    assert_eq!(
        statuses_of(&running, &client, 6).await,
        [200, 200, 200, 200, 200, 429]
    );
}

#[tokio::test]
async fn the_admin_endpoint_resets_one_client_in_memory() {
    the_admin_endpoint_resets_one_client(&[]).await;
}

#[tokio::test]
async fn the_admin_endpoint_resets_one_client_on_redis() {
    let url = support::shared_redis_url();
    the_admin_endpoint_resets_one_client(&[("REDIS_URL", &url)]).await;
}

#[tokio::test]
async fn without_admin_token_there_is_no_admin_endpoint() {
    let running = start(&[("RATE_LIMIT", "5/min")]);
    for authorization in [None, Some("Bearer "), Some("Bearer anything")] {
        let (status, ..) = admin_delete(&running, "quickstart/alice", authorization).await;
        assert_eq!(status, 404, "{authorization:?}");
    }
    // An empty token is no token: it would let anyone in with "Bearer ".
    let running = start(&[("RATE_LIMIT", "5/min"), ("ADMIN_TOKEN", "")]);
    let (status, ..) = admin_delete(&running, "quickstart/alice", Some("Bearer ")).await;
    assert_eq!(status, 404);
}

/// Signs in to the quickstart with `password`: the status and the `ratelimit` header.
async fn signin(running: &Running, password: &str) -> (u16, String) {
    let r = support::client()
        .post(format!("http://127.0.0.1:{}/signin", running.1))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("password={password}"))
        .send()
        .await
        .unwrap();
    let header = r.headers()["ratelimit"].to_str().unwrap().to_owned();
    (r.status().as_u16(), header)
}

/// Right passwords are never counted, three wrong ones are, then even the right one waits.
async fn assert_signin_counts_only_failures(running: &Running) {
    for _ in 0..4 {
        let (status, header) = signin(running, "open-sesame").await;
        assert_eq!(status, 200);
        assert!(header.starts_with("\"signin\";r=2;"), "{header}");
    }
    // Each failure's headers are the quota before it was counted.
    let mut failures = Vec::new();
    for _ in 0..3 {
        let (status, header) = signin(running, "guess").await;
        let left = header.strip_prefix("\"signin\";r=").map(|rest| &rest[..1]);
        failures.push((status, left.map(str::to_owned)));
    }
    let left = |r: &str| Some(r.to_owned());
    assert_eq!(
        failures,
        [(401, left("2")), (401, left("1")), (401, left("0"))]
    );
    let (status, header) = signin(running, "open-sesame").await;
    assert_eq!(status, 429);
    assert!(header.starts_with("\"signin\";r=0;"), "{header}");
}

#[tokio::test]
async fn signin_counts_only_failed_attempts() {
    let running = start(&[("RATE_LIMIT", "100/min")]);
    assert_signin_counts_only_failures(&running).await;
}

#[tokio::test]
async fn signin_counts_only_failed_attempts_with_the_example_rules_file() {
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/rules.toml");
    let running = start(&[("RULES_FILE", rules)]);
    assert_signin_counts_only_failures(&running).await;
}
