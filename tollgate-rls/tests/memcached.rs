//! The built `tollgate-rls` on memcached (`BACKEND_TYPE=memcache`, `MEMCACHE_HOST_PORT` or
//! `MEMCACHE_SRV`, as the reference's `src/settings/settings.go` reads them): two instances on
//! one memcached exact at the limit, all at once and at 64 in flight, and on the servers of a
//! DNS SRV record; hostile values counted apart, never as memcached commands; memcached
//! settings that cannot work stop the start.

mod support;

use std::sync::Arc;

use support::{ask, request, run_to_exit, MemcachedServer, Rls, Runtime, SrvServer, RESOLV_CONF};
use tollgate_rls::proto::rate_limit_response::Code;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const SHARED: &str = "
domain: shared
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 100 }
";

/// 300 asks of `tenant` over both instances' `clients`, at most `in_flight` at once: how many
/// were OK and how many over the limit.
async fn asks(
    clients: &[tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient<
        tonic::transport::Channel,
    >],
    tenant: &str,
    in_flight: usize,
) -> (usize, usize) {
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let mut tasks = Vec::new();
    for i in 0..300 {
        let mut client = clients[i % 2].clone();
        let permits = Arc::clone(&permits);
        let tenant = tenant.to_owned();
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire().await.unwrap();
            ask(&mut client, request("shared", &[&[("tenant", &tenant)]])).await
        }));
    }
    let (mut ok, mut over) = (0, 0);
    for task in tasks {
        let r = task.await.unwrap();
        assert!(
            r.statuses.iter().all(|s| s.current_limit.is_some()),
            "{r:?}"
        );
        ok += usize::from(r.overall_code == OK);
        over += usize::from(r.overall_code == OVER);
    }
    (ok, over)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_memcached_admit_exactly_the_limit() {
    let memcached = MemcachedServer::start();
    let runtime = Runtime::new("memcached-shared");
    runtime.write("shared.yaml", SHARED);
    let servers = memcached.address();
    let env = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", servers.as_str()),
        ("STORE_TIMEOUT", "5s"),
    ];
    let a = Rls::start(&runtime, &env);
    let b = Rls::start(&runtime, &env);
    assert!(a.line.contains("store=memcached (127.0.0.1:"), "{}", a.line);
    // Healthy: the reference's memcached deployment never is (`src/server/health.go` starts
    // its Redis part unhealthy and only the Redis client heals it), a defect not kept.
    let health = support::get_text(format!("http://{}/healthcheck", a.http)).await;
    assert_eq!(health, "OK");
    let clients = [a.client().await, b.client().await];
    assert_eq!(asks(&clients, "all-at-once", 300).await, (100, 200));
    assert_eq!(asks(&clients, "64-in-flight", 64).await, (100, 200));
}

/// The reference's `src/memcached/cache_impl.go` (`newMemcachedFromSrv`) looks `MEMCACHE_SRV`
/// up at the start, through the system's resolver (`src/srv/srv.go`), sorts the servers, and
/// panics when the lookup fails. Here the name server is the test's, on 127.0.0.1:53, named
/// by the `/etc/resolv.conf` the binary sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_the_servers_of_an_srv_record_admit_exactly_the_limit() {
    let (one, two) = (MemcachedServer::start(), MemcachedServer::start());
    let mut servers = [one.address(), two.address()];
    servers.sort();
    let addresses: Vec<_> = servers.iter().map(|s| s.parse().unwrap()).collect();
    let dns = SrvServer::start_at("127.0.0.1:53", &addresses);
    let runtime = Runtime::new("memcached-srv");
    runtime.write("shared.yaml", SHARED);
    let resolv_conf = runtime.root.join("resolv.conf");
    std::fs::write(&resolv_conf, "nameserver 127.0.0.1\n").unwrap();
    let env = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_SRV", "_memcache._tcp.cache.test"),
        ("MEMCACHE_SRV_REFRESH", "1s"),
        ("STORE_TIMEOUT", "5s"),
        (RESOLV_CONF, resolv_conf.to_str().unwrap()),
    ];
    let a = Rls::start(&runtime, &env);
    let b = Rls::start(&runtime, &env);
    let listed = format!(
        "store=memcached (_memcache._tcp.cache.test: {})",
        servers.join(",")
    );
    assert!(a.line.contains(&listed), "{}", a.line);
    let clients = [a.client().await, b.client().await];
    assert_eq!(asks(&clients, "srv", 64).await, (100, 200));
    assert!(dns.queries() >= 2, "{}", dns.queries());

    // A record that names no server stops the start (status 2), naming the variable.
    dns.set(&[]);
    let (status, stderr) = run_to_exit(&runtime.root, &env);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("MEMCACHE_SRV: "), "{stderr}");
}

#[test]
fn memcached_settings_that_cannot_work_stop_the_start() {
    let runtime = Runtime::new("memcached-settings");
    runtime.write("shared.yaml", SHARED);
    for (env, name) in [
        (vec![("BACKEND_TYPE", "memcache")], "BACKEND_TYPE=memcache"),
        (
            vec![
                ("BACKEND_TYPE", "memcache"),
                ("MEMCACHE_HOST_PORT", "memcached"),
            ],
            "MEMCACHE_HOST_PORT=",
        ),
        (
            vec![("MEMCACHE_HOST_PORT", "127.0.0.1:11211")],
            "MEMCACHE_HOST_PORT",
        ),
        (
            vec![("BACKEND_TYPE", "memcache"), ("MEMCACHE_SRV", "cache.test")],
            "MEMCACHE_SRV: ",
        ),
    ] {
        let (status, stderr) = run_to_exit(&runtime.root, &env);
        assert_eq!(status.code(), Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(name), "{env:?}: {stderr}");
    }
}

/// Hostile descriptor values on memcached: spaces, a line break followed by a memcached
/// command, non-ASCII, a value past memcached's 250-byte keys (up to `rls::MAX_VALUE_BYTES`).
/// Each is counted on its own, exactly (two OK, then over the limit), and none reaches
/// memcached as a command: a client spent before them is still over its limit after them.
#[tokio::test]
async fn hostile_values_are_counted_apart_and_never_reach_memcached_as_commands() {
    let memcached = MemcachedServer::start();
    let runtime = Runtime::new("memcached-hostile");
    runtime.write(
        "hostile.yaml",
        "
domain: hostile
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 2 }
",
    );
    let servers = memcached.address();
    let env = [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", servers.as_str()),
        ("STORE_TIMEOUT", "5s"),
    ];
    let rls = Rls::start(&runtime, &env);
    let client = rls.client().await;
    let codes = |value: String| {
        let mut client = client.clone();
        async move {
            let mut codes = Vec::new();
            for _ in 0..3 {
                let r = ask(&mut client, request("hostile", &[&[("tenant", &value)]])).await;
                codes.push(r.overall_code);
            }
            codes
        }
    };
    assert_eq!(codes("victim".into()).await, [OK, OK, OVER]);
    let long = "v".repeat(tollgate_rls::MAX_VALUE_BYTES - 2);
    for value in [
        "a b".to_owned(),
        "x\r\nflush_all\r\nmn".to_owned(),
        "ünïcødé".to_owned(),
        "#0000".to_owned(),
        format!("{long}vv"),
        format!("{long}\r\n"),
    ] {
        assert_eq!(codes(value.clone()).await, [OK, OK, OVER], "{value:?}");
    }
    assert_eq!(codes("victim".into()).await, [OVER, OVER, OVER]);
}
