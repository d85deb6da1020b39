//! The built `tollgate-rls` pushing its statistics to statsd as the reference does: on by
//! default (`USE_STATSD`, its `src/settings/settings.go` line 87), over TCP as its gostats
//! sink sends unless `STATSD_PROTOCOL=udp` (`src/service_cmd/runner/runner.go` line 69,
//! `NewTCPStatsdSink`), every `STATS_FLUSH_INTERVAL`, under the names of its
//! `src/stats/manager_impl.go` and `src/metrics/metrics.go`; DogStatsD with `USE_DOG_STATSD`,
//! `EXTRA_TAGS` as tags and mogrifiers (`src/godogstats/`). Listeners here receive the lines.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{ask, request, run_to_exit, shared_redis_url, Rls, Runtime};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, UdpSocket};
use tollgate_rls::proto::rate_limit_response::Code;

const PUSHED: &str = "\
domain: pushed
descriptors:
  - key: k
    rate_limit: { unit: day, requests_per_unit: 2 }
";

/// Lines received so far, from every connection or datagram.
type Lines = Arc<Mutex<Vec<String>>>;

/// A statsd server on TCP: every line of every connection.
async fn tcp_statsd() -> (u16, Lines) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let lines = Lines::default();
    let sink = Arc::clone(&lines);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sink = Arc::clone(&sink);
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    sink.lock().unwrap().push(line);
                }
            });
        }
    });
    (port, lines)
}

/// A statsd server on UDP: every line of every datagram.
async fn udp_statsd() -> (u16, Lines) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = socket.local_addr().unwrap().port();
    let lines = Lines::default();
    let sink = Arc::clone(&lines);
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok(n) = socket.recv(&mut buf).await {
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            sink.lock().unwrap().extend(text.lines().map(str::to_owned));
        }
    });
    (port, lines)
}

/// The counters in `lines` summed by name (with its tags): `name:value|c[|#tags]`.
fn counters(lines: &[String]) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    for line in lines {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let mut parts = rest.split('|');
        let (value, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if kind != "c" {
            continue;
        }
        let key = match parts.next() {
            Some(tags) => format!("{name}|{tags}"),
            None => name.to_owned(),
        };
        *out.entry(key).or_insert(0) += value.parse::<u64>().unwrap();
    }
    out
}

/// Waits (up to 10 s) until the counters received hold `want`; what was received then.
async fn until(lines: &Lines, want: &[(&str, u64)]) -> (HashMap<String, u64>, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = lines.lock().unwrap().clone();
        let summed = counters(&seen);
        let all = want.iter().all(|(k, v)| summed.get(*k) == Some(v));
        if all || Instant::now() > deadline {
            return (summed, seen);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn unique(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{test}-{}-{nanos}", std::process::id())
}

/// Three hits on a limit of two, on Redis, with the environment left at the reference's
/// defaults but for where statsd is: the lines arrive over TCP under the reference's names,
/// counted as its `base_limiter.go` counts them (`GetResponseDescriptorStatus`, line 83;
/// `checkOverLimitThreshold`, line 159; `checkNearLimitThreshold`, line 176): 1 within; 1
/// within and near (past floor(2 × 0.8) = 1); 1 over. The names: `manager_impl.go` lines
/// 12-38 (`ratelimit.service.rate_limit.<key>.<stat>`, `config_load_success` line 58),
/// `metrics.go` lines 24-25 (`ratelimit_server.<method>.total_requests`, `.response_time` in
/// milliseconds), `driver_impl.go` line 30 (`cx_active` of the `redis_pool` scope).
#[tokio::test]
async fn statistics_reach_statsd_over_tcp_with_the_references_names() {
    let (port, lines) = tcp_statsd().await;
    let runtime = Runtime::new("statsd-tcp");
    runtime.write("pushed.yaml", PUSHED);
    let prefix = unique("statsd");
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_URL", &shared_redis_url()),
            ("CACHE_KEY_PREFIX", &prefix),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port.to_string()),
            ("STATS_FLUSH_INTERVAL", "100ms"),
        ],
    );
    let mut client = rls.client().await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let answer = ask(&mut client, request("pushed", &[&[("k", "v")]])).await;
        codes.push(answer.overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [ok, ok, over]);
    let want = [
        ("ratelimit.service.rate_limit.pushed.k.total_hits", 3),
        ("ratelimit.service.rate_limit.pushed.k.within_limit", 2),
        ("ratelimit.service.rate_limit.pushed.k.near_limit", 1),
        ("ratelimit.service.rate_limit.pushed.k.over_limit", 1),
        ("ratelimit_server.ShouldRateLimit.total_requests", 3),
        ("ratelimit.service.config_load_success", 1),
    ];
    let (summed, seen) = until(&lines, &want).await;
    for (name, count) in want {
        assert_eq!(summed.get(name), Some(&count), "{name} in {seen:#?}");
    }
    // Nothing else is counted: no shadow mode, no error, no library statistics.
    assert_eq!(summed.len(), want.len(), "{seen:#?}");
    // Every call timed, in milliseconds: the sample rates count them.
    let calls: f64 = (seen.iter())
        .filter_map(|l| l.strip_prefix("ratelimit_server.ShouldRateLimit.response_time:"))
        .map(|rest| {
            let mut parts = rest.split('|');
            let (_, kind) = (parts.next(), parts.next());
            assert_eq!(kind, Some("ms"), "{rest}");
            parts
                .next()
                .and_then(|r| r.strip_prefix('@'))
                .map_or(1.0, |r| 1.0 / r.parse::<f64>().unwrap())
        })
        .sum();
    assert_eq!(calls.round(), 3.0, "{seen:#?}");
    // The pool's open connection (one, multiplexed), as a gauge at each flush, and on
    // /metrics under the name the reference's Prometheus sink gives it (unmapped).
    let gauge = "ratelimit.redis_pool.cx_active:1|g";
    let deadline = Instant::now() + Duration::from_secs(5);
    while !lines.lock().unwrap().iter().any(|l| l == gauge) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        lines.lock().unwrap().iter().any(|l| l == gauge),
        "{seen:#?}"
    );
    let metrics = support::get_text(format!("http://{}/metrics", rls.http)).await;
    assert!(
        metrics.contains("\nratelimit_redis_pool_cx_active 1\n"),
        "{metrics}"
    );
    assert!(
        !rls.stderr().contains("cannot reach statsd"),
        "{}",
        rls.stderr()
    );
}

/// `USE_DOG_STATSD` (with `USE_STATSD=false`, as runner.go requires, line 53): UDP, the same
/// names, `EXTRA_TAGS` as tags first (gostats sorts them; `dogstatsd_sink.go`,
/// `separateTags`) and then a mogrifier's tags, the README's "HITS" example
/// (`mogrifier_map.go`).
#[tokio::test]
async fn dogstatsd_carries_extra_tags_and_mogrifies() {
    let (port, lines) = udp_statsd().await;
    let runtime = Runtime::new("dogstatsd");
    runtime.write("pushed.yaml", PUSHED);
    let rls = Rls::start(
        &runtime,
        &[
            ("USE_STATSD", "false"),
            ("USE_DOG_STATSD", "true"),
            ("EXTRA_TAGS", "team:edge,env:prod"),
            ("USE_DOG_STATSD_MOGRIFIERS", "HITS"),
            (
                "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
                r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
            ),
            (
                "DOG_STATSD_MOGRIFIER_HITS_NAME",
                "ratelimit.service.rate_limit.$3",
            ),
            ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port.to_string()),
            ("STATS_FLUSH_INTERVAL", "100ms"),
        ],
    );
    let mut client = rls.client().await;
    ask(&mut client, request("pushed", &[&[("k", "v")]])).await;
    let want = [
        (
            "ratelimit.service.rate_limit.total_hits|#env:prod,team:edge,domain:pushed,descriptor:k",
            1,
        ),
        (
            "ratelimit.service.rate_limit.within_limit|#env:prod,team:edge,domain:pushed,descriptor:k",
            1,
        ),
        (
            "ratelimit_server.ShouldRateLimit.total_requests|#env:prod,team:edge",
            1,
        ),
        ("ratelimit.service.config_load_success|#env:prod,team:edge", 1),
    ];
    let (summed, seen) = until(&lines, &want).await;
    for (name, count) in want {
        assert_eq!(summed.get(name), Some(&count), "{name} in {seen:#?}");
    }
    assert_eq!(summed.len(), want.len(), "{seen:#?}");
}

/// Plain statsd over UDP (`STATSD_PROTOCOL=udp`, gostats's `settings.go`): `EXTRA_TAGS` end
/// every name as gostats serializes a scope's tags, `.__name=value` by name
/// (`internal/tags/tags.go`, `SerializeTags`).
#[tokio::test]
async fn plain_statsd_puts_extra_tags_in_the_names() {
    let (port, lines) = udp_statsd().await;
    let runtime = Runtime::new("statsd-udp");
    runtime.write("pushed.yaml", PUSHED);
    let rls = Rls::start(
        &runtime,
        &[
            ("STATSD_PROTOCOL", "udp"),
            ("EXTRA_TAGS", "team:edge,env:prod"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port.to_string()),
            ("STATS_FLUSH_INTERVAL", "100ms"),
        ],
    );
    let mut client = rls.client().await;
    ask(&mut client, request("pushed", &[&[("k", "v")]])).await;
    let want = [
        (
            "ratelimit.service.rate_limit.pushed.k.total_hits.__env=prod.__team=edge",
            1,
        ),
        (
            "ratelimit_server.ShouldRateLimit.total_requests.__env=prod.__team=edge",
            1,
        ),
    ];
    let (summed, seen) = until(&lines, &want).await;
    for (name, count) in want {
        assert_eq!(summed.get(name), Some(&count), "{name} in {seen:#?}");
    }
    assert!(seen.iter().all(|l| !l.contains("|#")), "{seen:#?}");
}

/// statsd down at start, then up: the failure is logged once (not at every flush), nothing is
/// kept for later (gostats's `latch` resets a counter at every flush, sent or not), and the
/// push resumes with the next growth once statsd listens.
#[tokio::test]
async fn an_unreachable_statsd_is_logged_once_and_followed_when_back() {
    let port = support::free_port();
    let runtime = Runtime::new("statsd-down");
    runtime.write("pushed.yaml", PUSHED);
    let rls = Rls::start(
        &runtime,
        &[
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port.to_string()),
            ("STATS_FLUSH_INTERVAL", "50ms"),
        ],
    );
    let mut client = rls.client().await;
    ask(&mut client, request("pushed", &[&[("k", "v")]])).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let log = rls.stderr();
    assert_eq!(log.matches("cannot reach statsd").count(), 1, "{log}");
    assert!(!log.contains("again"), "{log}");

    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let lines = Lines::default();
    let sink = Arc::clone(&lines);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sink = Arc::clone(&sink);
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    sink.lock().unwrap().push(line);
                }
            });
        }
    });
    ask(&mut client, request("pushed", &[&[("k", "v")]])).await;
    let hits = "ratelimit.service.rate_limit.pushed.k.total_hits";
    let (summed, seen) = until(&lines, &[(hits, 1)]).await;
    assert_eq!(summed.get(hits), Some(&1), "{seen:#?}");
    assert!(
        rls.stderr().contains("reach statsd at 127.0.0.1"),
        "{}",
        rls.stderr()
    );
    assert!(rls.stderr().contains("again"), "{}", rls.stderr());
}

/// `USE_STATSD=false` and `DISABLE_STATS=true`: not one line, on TCP or UDP, across many
/// flush intervals.
#[tokio::test]
async fn nothing_is_sent_when_statsd_is_off() {
    for off in [("USE_STATSD", "false"), ("DISABLE_STATS", "true")] {
        let (port, tcp) = tcp_statsd().await;
        let udp_socket = UdpSocket::bind(("127.0.0.1", port)).await.unwrap();
        let runtime = Runtime::new("statsd-off");
        runtime.write("pushed.yaml", PUSHED);
        let rls = Rls::start(
            &runtime,
            &[
                off,
                ("STATSD_HOST", "127.0.0.1"),
                ("STATSD_PORT", &port.to_string()),
                ("STATS_FLUSH_INTERVAL", "50ms"),
            ],
        );
        let mut client = rls.client().await;
        ask(&mut client, request("pushed", &[&[("k", "v")]])).await;
        let mut buf = [0u8; 1024];
        let received =
            tokio::time::timeout(Duration::from_millis(1500), udp_socket.recv(&mut buf)).await;
        assert!(received.is_err(), "{off:?}: a datagram arrived");
        assert!(tcp.lock().unwrap().is_empty(), "{off:?}");
    }
}

/// runner.go, lines 48-80: one statistics sink at a time; `USE_STATSD` is true unless set,
/// so `USE_PROMETHEUS=true` alone stops the start (status 2, naming both).
#[test]
fn two_sinks_stop_the_start() {
    let runtime = Runtime::new("two-sinks");
    runtime.write("pushed.yaml", PUSHED);
    let (status, stderr) = run_to_exit(&runtime.root, &[("USE_PROMETHEUS", "true")]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("USE_STATSD=true and USE_PROMETHEUS=true"),
        "{stderr}"
    );
}
