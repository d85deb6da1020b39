//! The quickstart example as a new user runs it: choosing its store from the environment.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use support::{RedisCluster, RedisSentinel, SecureRedis};

/// The quickstart binary, which `cargo test` builds next to the test binaries (a filtered
/// `cargo test --test integration quickstart::` does not: `cargo build --example quickstart` first).
pub(crate) fn quickstart() -> Command {
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
        "MEMCACHE_URL",
        "RULES_FILE",
        "ADMIN_TOKEN",
        "HEADERS",
        "IN_FLIGHT",
        "IN_FLIGHT_TTL",
    ] {
        command.env_remove(name);
    }
    command.env("RUST_LOG", "warn");
    command
}

/// A running quickstart, killed when dropped.
pub(crate) struct Running(pub(crate) Child, pub(crate) u16);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the quickstart with `vars` and waits for its `listening on` line.
pub(crate) fn start(vars: &[(&str, &str)]) -> Running {
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

#[test]
fn a_store_timeout_that_is_not_milliseconds_is_an_error_at_start_up() {
    for bad in ["0", "2s", "-1"] {
        let output = quickstart()
            .env("STORE_TIMEOUT_MS", bad)
            .output()
            .expect("quickstart");
        assert_eq!(output.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            stderr.trim(),
            "error: STORE_TIMEOUT_MS: expected milliseconds, above 0",
            "{bad}"
        );
    }
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

/// `DELETE /admin/limits/{path}` as the client `key` (an `x-api-key`, if any) with this
/// `authorization` header (if any): status, the `www-authenticate` header (or "-"), whether
/// it had rate-limit headers, and the body.
async fn admin_delete_as(
    running: &Running,
    key: Option<&str>,
    path: &str,
    authorization: Option<&str>,
) -> (u16, String, bool, String) {
    let mut request = support::client().delete(format!(
        "http://127.0.0.1:{}/admin/limits/{path}",
        running.1
    ));
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
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

/// `DELETE /admin/limits/{path}` from this peer with no API key.
async fn admin_delete(
    running: &Running,
    path: &str,
    authorization: Option<&str>,
) -> (u16, String, bool, String) {
    admin_delete_as(running, None, path, authorization).await
}

/// The admin endpoint: only with the token (401 otherwise, whatever else is sent), 404 for
/// an unknown rule, 204 and a whole quota again for the client; rate limited like any route,
/// and by its own rule to 10 requests a minute per client IP whatever the API key.
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
        true,
        "Unauthorized: send authorization: Bearer <ADMIN_TOKEN>\n".to_owned(),
    );
    // Each with an API key of its own, so that only the admin rule (by IP) counts them.
    for (i, wrong) in [
        None,
        Some("Bearer"),
        Some("Bearer "),
        Some("Bearer t0ken"),
        Some("Bearer t0ken-with-enough-entropy2"),
        Some("bearer t0ken-with-enough-entropy"),
        Some("Basic dDBrZW4td2l0aC1lbm91Z2gtZW50cm9weQ=="),
        Some("t0ken-with-enough-entropy"),
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("{client}-admin-{i}");
        assert_eq!(
            admin_delete_as(&running, Some(&key), &path, wrong).await,
            unauthorized,
            "{wrong:?}"
        );
    }
    // Still denied: nothing was reset.
    assert_eq!(statuses_of(&running, &client, 1).await, [429]);

    let bearer = format!("Bearer {token}");
    let admin_key = format!("{client}-admin");
    assert_eq!(
        admin_delete_as(
            &running,
            Some(&admin_key),
            &format!("nope/{client}"),
            Some(&bearer)
        )
        .await,
        (
            404,
            "-".to_owned(),
            true,
            "no rule named \"nope\" (the rules in force are: quickstart, signin, admin)\n"
                .to_owned()
        )
    );
    assert_eq!(
        admin_delete_as(&running, Some(&admin_key), &path, Some(&bearer)).await,
        (204, "-".to_owned(), true, String::new())
    );
    assert_eq!(
        statuses_of(&running, &client, 6).await,
        [200, 200, 200, 200, 200, 429]
    );
    // The tenth admin request from this IP in a minute was the last: the right token waits too.
    let (status, _, limited, _) =
        admin_delete_as(&running, Some(&admin_key), &path, Some(&bearer)).await;
    assert_eq!((status, limited), (429, true));
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

/// A run of wrong tokens from one IP is blocked after ten, whatever API key each one sends
/// (the general quota, per API key, is far away here).
#[tokio::test]
async fn a_run_of_wrong_admin_tokens_from_one_client_is_blocked() {
    let running = start(&[("ADMIN_TOKEN", "s3cret-admin"), ("RATE_LIMIT", "1000/min")]);
    let mut statuses = Vec::new();
    for i in 0..12 {
        let key = support::unique_prefix(&format!("guesser-{i}"));
        let guess = format!("Bearer guess-{i}");
        let (status, ..) =
            admin_delete_as(&running, Some(&key), "quickstart/alice", Some(&guess)).await;
        statuses.push(status);
    }
    assert_eq!(
        statuses,
        [401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 429, 429]
    );
}

/// `GET {path}` as the client `key`: the status and whether it had rate-limit headers.
async fn get_as(running: &Running, path: &str, key: &str) -> (u16, bool) {
    let r = support::client()
        .get(format!("http://127.0.0.1:{}{path}", running.1))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.headers().contains_key("ratelimit"))
}

/// Every answer goes through the limiter, 404s included, with or without the admin route.
#[tokio::test]
async fn unknown_paths_are_limited_with_and_without_admin_token() {
    for admin_token in [None, Some("s3cret-admin")] {
        let mut vars = vec![("RATE_LIMIT", "5/min")];
        vars.extend(admin_token.map(|token| ("ADMIN_TOKEN", token)));
        let running = start(&vars);
        let mut answers = Vec::new();
        for path in [
            "/nope",
            "/admin",
            "/admin/limits/quickstart/alice",
            "/nope/2",
            "/.env",
            "/nope",
        ] {
            answers.push(get_as(&running, path, "prober").await);
        }
        let limited = |status| (status, true);
        assert_eq!(
            answers,
            [
                limited(404),
                limited(404),
                // A DELETE route answers 405 to a GET when it exists.
                limited(if admin_token.is_some() { 405 } else { 404 }),
                limited(404),
                limited(404),
                limited(429),
            ],
            "ADMIN_TOKEN {admin_token:?}"
        );
    }
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

/// Starts the quickstart with `vars` and `RUST_LOG` as given (`None`: the quickstart's own
/// default), and gathers the lines it logs (on stdout, after `listening on`) on a thread.
fn start_logging(
    vars: &[(&str, &str)],
    rust_log: Option<&str>,
) -> (Running, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let port = support::free_port();
    let mut command = quickstart();
    command.env_remove("RUST_LOG");
    if let Some(filter) = rust_log {
        command.env("RUST_LOG", filter);
    }
    let mut child = command
        .env("PORT", port.to_string())
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("quickstart");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line");
    assert!(line.starts_with("listening on"), "{line}");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let gathered = std::sync::Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            gathered.lock().unwrap().push(without_colours(&line));
        }
    });
    (Running(child, port), lines)
}

/// A Redis Cluster master killed under traffic: the Redis client warns at every attempt to
/// reach it (hundreds of lines a second); by default the quickstart shows none of that, and
/// tollgate's own lines say what happened once each. `RUST_LOG=info,redis=warn` shows the
/// client's lines, as its docs say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_does_not_flood_the_log() {
    let mut cluster = RedisCluster::start();
    let nodes = cluster.urls().join(",");
    let vars = [
        ("REDIS_CLUSTER_NODES", nodes.as_str()),
        ("RATE_LIMIT", "1000/min"),
    ];
    let (quiet, quiet_log) = start_logging(&vars, None);
    let (verbose, verbose_log) = start_logging(&vars, Some("info,redis=warn"));
    // Clients on every master, the victim's among them.
    let clients: Vec<String> = (0..12).map(|i| format!("failover-client-{i}")).collect();
    let victim = cluster.master_of("tollgate:quickstart:gcra:{failover-client-0}");
    for running in [&quiet, &verbose] {
        assert_eq!(get_root(running, &clients[0]).await.status(), 200);
    }
    cluster.kill(victim);
    let killed = std::time::Instant::now();
    while killed.elapsed() < std::time::Duration::from_secs(5) {
        for client in &clients {
            for running in [&quiet, &verbose] {
                let status = get_root(running, client).await.status();
                assert!(status == 200 || status == 429, "{status}");
            }
        }
    }
    // Let the last lines be written.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let from_redis = |lines: &[String]| lines.iter().filter(|l| l.contains(" redis::")).count();
    let verbose_lines = verbose_log.lock().unwrap().clone();
    let quiet_lines = quiet_log.lock().unwrap().clone();
    eprintln!(
        "5 s of failover: {} lines from the Redis client with RUST_LOG=info,redis=warn, {} by \
         default; {} lines in all by default",
        from_redis(&verbose_lines),
        from_redis(&quiet_lines),
        quiet_lines.len()
    );
    assert!(
        from_redis(&verbose_lines) >= 10,
        "the client's warnings show when asked for: {verbose_lines:#?}"
    );
    assert_eq!(from_redis(&quiet_lines), 0, "{quiet_lines:#?}");
    // tollgate's own: each kind of line at most once (failing, circuit open, answering again).
    let tollgate: Vec<&String> = quiet_lines
        .iter()
        .filter(|l| l.contains(" tollgate: "))
        .collect();
    for kind in [
        "(store redis_cluster);",
        "keeps failing, circuit breaker open",
        "answers again, circuit breaker closed",
    ] {
        let n = tollgate.iter().filter(|l| l.contains(kind)).count();
        assert!(n <= 1, "{kind}: {tollgate:#?}");
    }
    assert_eq!(quiet_lines.len(), tollgate.len(), "{quiet_lines:#?}");
}

/// `line` without its ANSI colour sequences (`ESC [ … m`).
fn without_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(|&c| c == 'm');
        } else {
            plain.push(c);
        }
    }
    plain
}

/// Two quickstarts sharing one memcached (`MEMCACHE_URL`) admit exactly 10 of 60 concurrent
/// requests of one client, for each of the seven algorithms.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_quickstarts_on_memcached_admit_exactly_the_limit_for_every_algorithm() {
    let url = support::memcached::shared_memcached_url();
    for algorithm in tollgate::Algorithm::ALL {
        let vars = [
            ("MEMCACHE_URL", url.as_str()),
            ("RATE_LIMIT", "10/min"),
            ("ALGORITHM", algorithm.as_str()),
            ("ON_STORE_ERROR", "deny"),
            // A burst on one key takes turns in each instance, two round trips a turn: on a
            // busy machine, past the default 50 ms for the last in line.
            ("STORE_TIMEOUT_MS", "2000"),
        ];
        let instances = [start(&vars), start(&vars)];
        // Each instance's first connection to memcached, made before the burst.
        for instance in &instances {
            assert_eq!(get_root(instance, "warm-up").await.status(), 200);
        }
        let client = support::unique_prefix("mc-quickstart");
        let http = support::client();
        let requests: Vec<_> = (0..60)
            .map(|i| {
                let url = format!("http://127.0.0.1:{}/", instances[i % 2].1);
                let (client, http) = (client.clone(), http.clone());
                tokio::spawn(async move {
                    let response = http
                        .get(url)
                        .header("x-api-key", client)
                        .send()
                        .await
                        .unwrap();
                    response.status().as_u16()
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for request in requests {
            statuses.push(request.await.unwrap());
        }
        let admitted = statuses.iter().filter(|&&s| s == 200).count();
        let denied = statuses.iter().filter(|&&s| s == 429).count();
        assert_eq!((admitted, denied), (10, 50), "{algorithm}: {statuses:?}");
    }
}
