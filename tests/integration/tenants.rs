//! The tenants example as its users run it: quotas per API key from a plan lookup, changed by
//! an admin on every instance at once, over real HTTP and a real redis-server, two instances
//! of the example's binary side by side.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "an-admin-token-long-enough";

/// The example's binary, which `cargo test` builds next to the test binaries (a filtered
/// `cargo test --test integration tenants::` does not: `cargo build --example tenants` first).
fn tenants() -> Command {
    let deps = std::env::current_exe().expect("test binary path");
    let path: PathBuf = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory")
        .join("examples")
        .join("tenants");
    let mut command = Command::new(path);
    command.env_remove("REDIS_URL").env("RUST_LOG", "warn");
    command
}

/// A running instance, killed when dropped.
struct Instance(Child, u16);

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An instance on the test's Redis, with the admin routes, once it says it listens.
fn start() -> Instance {
    let port = support::free_port();
    let mut child = tenants()
        .env("PORT", port.to_string())
        .env("REDIS_URL", support::shared_redis_url())
        .env("ADMIN_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the tenants example");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("a line");
    assert_eq!(line.trim(), format!("listening on http://127.0.0.1:{port}"));
    Instance(child, port)
}

/// A key of `plan` (`pro`, `plain`, `down`) no other test or run uses.
fn new_key(plan: &str) -> String {
    format!("{plan}-{}", support::unique_prefix("tenant"))
}

/// `GET /` as `key`: the status and `RateLimit-Policy`.
async fn get(instance: &Instance, key: &str) -> (u16, String) {
    let r = support::client()
        .get(format!("http://127.0.0.1:{}/", instance.1))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    let policy = r
        .headers()
        .get("ratelimit-policy")
        .map_or("-".into(), |v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), policy)
}

/// How many of `n` requests of `key`, alternately on each of `instances`, were allowed; every
/// answer is a 200 or a 429.
async fn allowed_of(instances: &[&Instance], key: &str, n: usize) -> usize {
    let mut allowed = 0;
    for i in 0..n {
        let (status, _) = get(instances[i % instances.len()], key).await;
        assert!(status == 200 || status == 429, "{status}");
        allowed += usize::from(status == 200);
    }
    allowed
}

/// `GET /lookups`.
async fn lookups(instance: &Instance) -> u64 {
    let body = support::client()
        .get(format!("http://127.0.0.1:{}/lookups", instance.1))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.trim().parse().expect("an integer")
}

/// `method /admin/quota/{key}` with `body` and the token if `authorized`: status and body.
async fn admin(
    instance: &Instance,
    method: reqwest::Method,
    key: &str,
    body: &str,
    authorized: bool,
) -> (u16, String) {
    let mut request = support::client()
        .request(
            method,
            format!("http://127.0.0.1:{}/admin/quota/{key}", instance.1),
        )
        .body(body.to_owned());
    if authorized {
        request = request.header("authorization", format!("Bearer {TOKEN}"));
    }
    let r = request.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn simultaneous_first_requests_of_a_key_make_one_lookup() {
    let instance = start();
    let before = lookups(&instance).await;
    let key = new_key("pro");
    let port = instance.1;
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let key = key.clone();
        requests.spawn(async move {
            let r = support::client()
                .get(format!("http://127.0.0.1:{port}/"))
                .header("x-api-key", key)
                .send()
                .await
                .unwrap();
            let policy = r.headers().get("ratelimit-policy").cloned();
            (
                r.status().as_u16(),
                policy.map(|v| v.to_str().unwrap().to_owned()),
            )
        });
    }
    let answers: Vec<(u16, String)> = requests
        .join_all()
        .await
        .into_iter()
        .map(|(status, policy)| (status, policy.unwrap_or_default()))
        .collect();
    assert!(answers
        .iter()
        .all(|(_, policy)| policy == "\"api\";q=20;w=10"));
    assert_eq!(answers.iter().filter(|(s, _)| *s == 200).count(), 20);
    assert_eq!(lookups(&instance).await - before, 1);
}

#[tokio::test]
async fn two_instances_on_one_redis_give_each_plan_exactly() {
    let (a, b) = (start(), start());
    assert_eq!(allowed_of(&[&a, &b], &new_key("pro"), 40).await, 20);
    assert_eq!(allowed_of(&[&a, &b], &new_key("plain"), 20).await, 5);
}

#[tokio::test]
async fn an_override_set_through_one_instance_holds_on_the_other_within_a_second() {
    let (a, b) = (start(), start());
    let key = new_key("pro");
    // B knows the key's plan, and that nothing is set for it.
    assert_eq!(get(&b, &key).await, (200, "\"api\";q=20;w=10".into()));
    assert_eq!(
        admin(&a, reqwest::Method::PUT, &key, "50/10s", true)
            .await
            .0,
        204
    );
    let set = Instant::now();
    // Asked every 50 ms: fewer requests than the plan allows in a second.
    let seen = loop {
        let (status, policy) = get(&b, &key).await;
        assert_eq!(status, 200);
        if policy == "\"api\";q=50;w=10" {
            break set.elapsed();
        }
        assert!(set.elapsed() < Duration::from_secs(2), "{policy}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(seen <= Duration::from_secs(1), "seen after {seen:?}");
    assert_eq!(
        admin(&b, reqwest::Method::GET, &key, "", true).await,
        (200, "50/10s\n".into())
    );
    assert_eq!(
        admin(&a, reqwest::Method::DELETE, &key, "", true).await.0,
        204
    );
    let cleared = Instant::now();
    let seen = loop {
        let (_, policy) = get(&b, &key).await;
        if policy == "\"api\";q=20;w=10" {
            break cleared.elapsed();
        }
        assert!(cleared.elapsed() < Duration::from_secs(2), "{policy}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(seen <= Duration::from_secs(1), "seen after {seen:?}");
}

#[tokio::test]
async fn a_quota_lowered_mid_window_lets_no_extra_request_through() {
    let (a, b) = (start(), start());
    let key = new_key("pro");
    assert_eq!(allowed_of(&[&a, &b], &key, 3).await, 3);
    // 3 of the plan's 20 used: lowered to 5, 2 are left, on either instance.
    assert_eq!(
        admin(&a, reqwest::Method::PUT, &key, "5/10s", true).await.0,
        204
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(allowed_of(&[&a, &b], &key, 10).await, 2);
    // Lowered below what was used: nothing more.
    let key = new_key("pro");
    assert_eq!(allowed_of(&[&a, &b], &key, 3).await, 3);
    assert_eq!(
        admin(&b, reqwest::Method::PUT, &key, "2/10s", true).await.0,
        204
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(allowed_of(&[&a, &b], &key, 10).await, 0);
}

#[tokio::test]
async fn a_key_whose_lookup_fails_gets_the_default_quota_and_never_a_server_error() {
    let (a, b) = (start(), start());
    let key = new_key("down");
    let before = lookups(&a).await;
    assert_eq!(allowed_of(&[&a, &b], &key, 12).await, 5);
    let (status, policy) = get(&a, &key).await;
    assert_eq!((status, policy.as_str()), (429, "\"api\";q=5;w=10"));
    assert!(lookups(&a).await > before);
}

#[tokio::test]
async fn bad_admin_calls_are_refused() {
    let instance = start();
    let key = new_key("plain");
    for method in [
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::GET,
    ] {
        let (status, body) = admin(&instance, method, &key, "50/10s", false).await;
        assert_eq!(status, 401, "{body}");
    }
    let (status, body) = admin(&instance, reqwest::Method::PUT, &key, "lots", true).await;
    assert_eq!(status, 400);
    assert!(body.contains("invalid quota \"lots\""), "{body}");
    let (status, body) = admin(&instance, reqwest::Method::PUT, &key, "0/10s", true).await;
    assert_eq!(status, 400);
    assert!(body.contains("limit must be at least 1"), "{body}");
    // Nothing was set.
    assert_eq!(get(&instance, &key).await, (200, "\"api\";q=5;w=10".into()));
}
