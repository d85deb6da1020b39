//! The quickstart's `IN_FLIGHT` as operators check it, over real HTTP: two instances on one
//! redis-server never run more than `IN_FLIGHT` requests of one client at once and keep
//! their slots busy; a client that hangs up frees its slot at once; the slots of an instance
//! killed with SIGKILL come back after `IN_FLIGHT_TTL`; one instance on memory does the same.

use crate::quickstart::{quickstart, Running};
use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::RedisServer;

/// Starts the quickstart with `vars`, waits for its `listening on` line, and passes what it
/// logs on to the test's output (prefixed with its port), so that a failure shows what the
/// instances saw.
fn start(vars: &[(&str, &str)]) -> Running {
    let port = support::free_port();
    let mut child = quickstart()
        .env("PORT", port.to_string())
        .env("RUST_LOG", "info")
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("quickstart");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a line").expect("a line");
    assert_eq!(first, format!("listening on http://127.0.0.1:{port}"));
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("quickstart :{port}: {line}");
        }
    });
    Running(child, port)
}

/// `IN_FLIGHT` in these tests.
const MAX: usize = 3;
/// How long each `/slow` request sleeps.
const SLOW: Duration = Duration::from_millis(200);
/// How long the clients keep calling.
const RUN: Duration = Duration::from_secs(5);

/// `GET /slow?ms=<ms>` on the quickstart at `port` as the client `key`: the status, and the
/// handler's (start, end) in µs when it answered.
async fn slow(
    client: &reqwest::Client,
    port: u16,
    key: &str,
    ms: u128,
) -> (u16, Option<(u64, u64)>) {
    let url = format!("http://127.0.0.1:{port}/slow?ms={ms}");
    let response = client
        .get(url)
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    if status != 200 {
        return (status, None);
    }
    let number = |name: &str| -> u64 {
        let rest = body.split(&format!("\"{name}\":")).nth(1).unwrap();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    (status, Some((number("start_us"), number("end_us"))))
}

/// One load at a time: two would share the machine's cores, and each measures how busy it
/// keeps its slots.
static LOAD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// 24 clients of one key call `/slow` on `instances` in turn for [`RUN`], each calling again
/// 10 ms after a refusal: the handlers' (start, end) of every answered request.
async fn load(instances: &[&Running], key: &str) -> Vec<(u64, u64)> {
    let _alone = LOAD.lock().await;
    let client = support::client();
    let until = Instant::now() + RUN;
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let (client, key) = (client.clone(), key.to_owned());
            let port = instances[i % instances.len()].1;
            tokio::spawn(async move {
                let mut answered = Vec::new();
                while Instant::now() < until {
                    match slow(&client, port, &key, SLOW.as_millis()).await {
                        (200, Some(span)) => answered.push(span),
                        (429, _) => tokio::time::sleep(Duration::from_millis(10)).await,
                        other => panic!("unexpected answer {other:?}"),
                    }
                }
                answered
            })
        })
        .collect();
    let mut answered = Vec::new();
    for task in tasks {
        answered.extend(task.await.unwrap());
    }
    answered
}

/// The most answered requests whose handlers overlapped at one instant, and how many started
/// in the first [`RUN`] after the first start.
fn overlap_and_admissions(mut answered: Vec<(u64, u64)>) -> (usize, usize) {
    answered.sort_unstable();
    let first = answered.first().map_or(0, |span| span.0);
    let window = first + RUN.as_micros() as u64;
    let admitted = answered.iter().filter(|span| span.0 < window).count();
    // Ends before starts at the same µs: a slot is given back after its request ended.
    let mut events: Vec<(u64, i32)> = answered
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    events.sort_unstable();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, change) in events {
        now += change;
        most = most.max(now);
    }
    (most as usize, admitted)
}

/// What both stores must show: never more than [`MAX`] at once, and the slots kept busy
/// (at least 90% of `MAX` per [`SLOW`]).
fn assert_exact_and_busy(answered: Vec<(u64, u64)>) {
    let (most, admitted) = overlap_and_admissions(answered);
    let full = MAX * (RUN.as_millis() / SLOW.as_millis()) as usize;
    eprintln!("at most {most} at once; {admitted} admitted of a possible {full}");
    assert!(most <= MAX, "{most} requests ran at once");
    assert!(
        admitted * 10 >= full * 9,
        "{admitted} admitted, below 90% of {full}"
    );
}

/// The quickstart's variables: `IN_FLIGHT=3` alone, on `store`, with slots living `ttl`. The
/// store may take its time on a busy machine: a call that timed out would let its request
/// through without a slot (failing open), which is not what these tests are about.
fn vars<'a>(store: &'a [(&'a str, &'a str)], ttl: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut vars = vec![
        ("RATE_LIMIT", "off"),
        ("IN_FLIGHT", "3"),
        ("IN_FLIGHT_TTL", ttl),
        ("STORE_TIMEOUT_MS", "2000"),
        ("ON_STORE_ERROR", "deny"),
    ];
    vars.extend_from_slice(store);
    vars
}

/// [`MAX`] clients of `key` whose requests to `through` hold every slot of `key` (checked
/// on `seen_from`), and then hang up when the returned streams are dropped.
///
/// A request that checks takes a slot for a moment itself: a hanging request that reaches
/// the server in that moment is refused. So the check is made once none of the hanging
/// requests has been answered (they are all running), and made again otherwise.
async fn hold_every_slot(
    client: &reqwest::Client,
    through: &Running,
    seen_from: &Running,
    key: &str,
) -> Vec<std::net::TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the slots were never all taken");
        let hung: Vec<_> = (0..MAX).map(|_| hanging(through, key)).collect();
        let refused = loop {
            match slow(client, seen_from.1, key, 0).await.0 {
                429 => break true,
                _ if hung.iter().any(answered) || Instant::now() > deadline => break false,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        if refused && !hung.iter().any(answered) {
            return hung;
        }
        // One of them was refused: hang up, and try again once every slot is back.
        drop(hung);
        admitted_after(client, seen_from, key, Instant::now()).await;
    }
}

/// Whether the server has answered the request on `stream` (a running one has not).
fn answered(stream: &std::net::TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let peeked = stream.peek(&mut [0; 1]);
    stream.set_nonblocking(false).unwrap();
    !matches!(peeked, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// How long after `since` `running` admits `key` again, asking every 5 ms.
async fn admitted_after(
    client: &reqwest::Client,
    running: &Running,
    key: &str,
    since: Instant,
) -> Duration {
    loop {
        if slow(client, running.1, key, 0).await.0 == 200 {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(30), "never admitted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A client that sends `GET /slow?ms=60000` as `key` on a connection of its own, then hangs
/// up when the returned stream is dropped.
fn hanging(running: &Running, key: &str) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", running.1)).unwrap();
    write!(
        stream,
        "GET /slow?ms=60000 HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {key}\r\n\r\n"
    )
    .unwrap();
    stream
}

/// [`MAX`] clients that hang up: each slot is free again within 100 ms.
async fn hang_ups_free_their_slots(running: &Running, key: &str) {
    let client = support::client();
    let hung = hold_every_slot(&client, running, running, key).await;
    let since = Instant::now();
    drop(hung);
    let after = admitted_after(&client, running, key, since).await;
    eprintln!("admitted {after:?} after the hang-ups");
    assert!(after <= Duration::from_millis(100), "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_run_at_most_in_flight_at_once_and_keep_slots_busy() {
    let redis = RedisServer::start();
    let url = redis.url();
    let store = [("REDIS_URL", url.as_str())];
    let (a, b) = (start(&vars(&store, "30s")), start(&vars(&store, "30s")));
    assert_exact_and_busy(load(&[&a, &b], "exact").await);
    hang_ups_free_their_slots(&a, "hangs-up").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_instance_on_memory_runs_at_most_in_flight_at_once_and_keeps_slots_busy() {
    let running = start(&vars(&[], "30s"));
    assert_exact_and_busy(load(&[&running], "exact").await);
    hang_ups_free_their_slots(&running, "hangs-up").await;
}

#[tokio::test]
async fn the_slots_of_an_instance_killed_come_back_within_in_flight_ttl() {
    let redis = RedisServer::start();
    let url = redis.url();
    let store = [("REDIS_URL", url.as_str())];
    let ttl = Duration::from_secs(2);
    let (mut a, b) = (start(&vars(&store, "2s")), start(&vars(&store, "2s")));
    let client = support::client();
    let held = hold_every_slot(&client, &a, &b, "crash").await;
    // Held past a renewal or two: the leases of a living instance do not run out.
    tokio::time::sleep(ttl + Duration::from_millis(500)).await;
    assert_eq!(slow(&client, b.1, "crash", 0).await.0, 429);
    a.0.kill().unwrap(); // SIGKILL
    a.0.wait().unwrap();
    let killed = Instant::now();
    let after = admitted_after(&client, &b, "crash", killed).await;
    eprintln!("admitted {after:?} after SIGKILL");
    // Not at once (the slots outlived their instance), and within their time to live.
    assert!(after >= ttl / 2, "{after:?}");
    assert!(after <= ttl + Duration::from_secs(1), "{after:?}");
    drop(held);
}

#[test]
fn in_flight_values_that_cannot_work_are_errors_at_start_up() {
    for (name, value, expected) in [
        (
            "IN_FLIGHT",
            "0",
            "IN_FLIGHT: expected a whole number of requests, above 0",
        ),
        (
            "IN_FLIGHT_TTL",
            "soon",
            "IN_FLIGHT_TTL: expected a duration such as 30s, 500ms or 1m",
        ),
    ] {
        let output = quickstart()
            .env("IN_FLIGHT", "3")
            .env(name, value)
            .output()
            .expect("quickstart");
        assert_eq!(output.status.code(), Some(2), "{name}={value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim(), format!("error: {expected}"));
    }
}
