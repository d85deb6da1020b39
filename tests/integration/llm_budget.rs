//! The `llm_budget` example as operators check it, over real HTTP: two instances on one
//! redis-server keep one token budget per key, past it by at most what was in flight; once it
//! is spent every request gets 429 until the window ends; the remaining tokens in the headers
//! are the budget less the settled costs; a client that drops a streamed answer is charged
//! its estimate; a body that is not the JSON gets 400 and costs nothing.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::quickstart::Running;
use crate::support::{self, RedisServer};

/// The example's binary, which `cargo test` builds next to the test binaries (a filtered
/// `cargo test --test integration llm_budget::` does not: `cargo build --example llm_budget`
/// first).
fn llm_budget() -> Command {
    let deps = std::env::current_exe().expect("test binary path");
    let path: PathBuf = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory")
        .join("examples")
        .join("llm_budget");
    let mut command = Command::new(path);
    command.env_remove("REDIS_URL").env_remove("TOKEN_BUDGET");
    command
}

/// Starts the example with `vars` and waits for its `listening on` line.
fn start(vars: &[(&str, &str)]) -> Running {
    let port = support::free_port();
    let mut child = llm_budget()
        .env("PORT", port.to_string())
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("llm_budget");
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout");
    BufReader::new(stdout).read_line(&mut line).expect("a line");
    assert_eq!(line.trim(), format!("listening on http://127.0.0.1:{port}"));
    Running(child, port)
}

/// What one call of `POST /v1/complete` got: its status and `RateLimit`'s `r` and `t`.
#[derive(Debug, Clone, Copy)]
struct Answer {
    status: u16,
    remaining: Option<u64>,
    reset: Option<u64>,
}

/// `POST /v1/complete` on `port` as `key` for `tokens`, streamed or not, with the estimate
/// `estimate` (none: the default, 100); its body read to the end.
async fn complete(
    client: &reqwest::Client,
    port: u16,
    key: &str,
    tokens: u64,
    stream: bool,
    estimate: Option<u64>,
) -> Answer {
    let body = format!("{{\"tokens\": {tokens}, \"stream\": {stream}}}");
    send(client, port, key, body, estimate).await
}

async fn send(
    client: &reqwest::Client,
    port: u16,
    key: &str,
    body: String,
    estimate: Option<u64>,
) -> Answer {
    let mut request = client
        .post(format!("http://127.0.0.1:{port}/v1/complete"))
        .header("x-api-key", key)
        .body(body);
    if let Some(estimate) = estimate {
        request = request.header("x-estimated-tokens", estimate.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let header = response
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned());
    response.bytes().await.unwrap();
    let field = |name: &str| -> Option<u64> {
        let value = header.as_deref()?;
        let rest = value.split(&format!(";{name}=")).nth(1)?;
        rest.split(';').next()?.parse().ok()
    };
    Answer {
        status,
        remaining: field("r"),
        reset: field("t"),
    }
}

/// Waits until a fixed window of `period` (aligned to the epoch, as the store's) has at least
/// `room` left, and returns when it ends.
async fn fresh_window(period: Duration, room: Duration) -> Instant {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let period_us = period.as_micros();
    let into = Duration::from_micros((since_epoch.as_micros() % period_us) as u64);
    let mut left = period - into;
    if left < room {
        tokio::time::sleep(left + Duration::from_millis(20)).await;
        left = period - Duration::from_millis(20);
    }
    Instant::now() + left
}

/// Two instances on one Redis and one key: 8 clients at once (4 on each), random costs from
/// 1 to 200, the default estimate of 100, half streamed. Tokens admitted stay within the
/// budget plus 8 × 200; once it is spent (a request reserving 1 is refused) every request
/// gets 429 with nothing left, until the window ends; then requests are admitted again.
#[tokio::test]
async fn two_instances_keep_one_budget_within_what_is_in_flight() {
    const BUDGET: u64 = 2000;
    const CLIENTS: u64 = 8;
    const MOST: u64 = 200;
    let period = Duration::from_secs(10);
    let redis = RedisServer::start();
    let vars = [("TOKEN_BUDGET", "2000/10s"), ("REDIS_URL", &redis.url())];
    let instances = [start(&vars), start(&vars)];
    let ports = [instances[0].1, instances[1].1];
    let window_end = fresh_window(period, Duration::from_secs(8)).await;

    let load_until = Instant::now() + Duration::from_secs(2);
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let port = ports[(i % 2) as usize];
            tokio::spawn(async move {
                let client = support::client();
                let mut rng = SmallRng::seed_from_u64(0x11b0 + i);
                let (mut admitted, mut refusals) = (0, 0);
                while refusals < 3 && Instant::now() < load_until {
                    let tokens = rng.random_range(1..=MOST);
                    let stream = rng.random_bool(0.5);
                    let answer = complete(&client, port, "shared", tokens, stream, None).await;
                    match answer.status {
                        200 => (admitted, refusals) = (admitted + tokens, 0),
                        429 => {
                            refusals += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        other => panic!("status {other}"),
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    // Spent to the end: requests reserving 1 and costing the most, one at a time, until one
    // is refused (what they cost past the budget is within the bound too).
    let client = support::client();
    let mut i = 0;
    loop {
        let answer = complete(&client, ports[i % 2], "shared", MOST, false, Some(1)).await;
        i += 1;
        if answer.status == 429 {
            assert_eq!(answer.remaining, Some(0), "{answer:?}");
            break;
        }
        assert_eq!(answer.status, 200);
        admitted += MOST;
        assert!(i < 100, "never refused");
    }
    assert!(
        (BUDGET..=BUDGET + CLIENTS * MOST).contains(&admitted),
        "{admitted} tokens admitted of {BUDGET}"
    );
    assert!(Instant::now() < window_end, "the run outlasted its window");
    // Spent: every request is refused until the window ends, on both instances.
    let mut refused = 0;
    while Instant::now() + Duration::from_millis(400) < window_end {
        // Read before asking: the reset the answer carries is counted at a later instant, so
        // it is at most this (with a second's margin for the window's start, read off the
        // system clock).
        let left = window_end
            .saturating_duration_since(Instant::now())
            .as_secs_f64()
            .ceil() as u64
            + 1;
        let answer = complete(
            &client,
            ports[refused % 2],
            "shared",
            1,
            refused % 3 == 0,
            Some(1),
        )
        .await;
        assert_eq!(
            (answer.status, answer.remaining),
            (429, Some(0)),
            "{answer:?}"
        );
        assert!(answer.reset.unwrap() <= left, "{answer:?}, {left} s left");
        refused += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused > 10, "{refused}");
    tokio::time::sleep_until(window_end + Duration::from_millis(200)).await;
    let answer = complete(&client, ports[0], "shared", 5, false, None).await;
    assert_eq!((answer.status, answer.remaining), (200, Some(BUDGET - 5)));
}

/// Two instances on one Redis: after 40 requests of random costs (8 at once, half
/// streamed), what the headers say is left is the budget less the sum of the costs.
#[tokio::test]
async fn the_remaining_tokens_are_the_budget_less_the_settled_costs() {
    let redis = RedisServer::start();
    let vars = [("TOKEN_BUDGET", "100000/30s"), ("REDIS_URL", &redis.url())];
    let instances = [start(&vars), start(&vars)];
    let ports = [instances[0].1, instances[1].1];
    let window_end = fresh_window(Duration::from_secs(30), Duration::from_secs(15)).await;
    let tasks: Vec<_> = (0..8u64)
        .map(|i| {
            let port = ports[(i % 2) as usize];
            tokio::spawn(async move {
                let client = support::client();
                let mut rng = SmallRng::seed_from_u64(0x5e7 + i);
                let mut spent = 0;
                for _ in 0..5 {
                    let tokens = rng.random_range(1..=200);
                    let stream = rng.random_bool(0.5);
                    let answer = complete(&client, port, "k", tokens, stream, None).await;
                    assert_eq!(answer.status, 200);
                    spent += tokens;
                }
                spent
            })
        })
        .collect();
    let mut spent = 0;
    for task in tasks {
        spent += task.await.unwrap();
    }
    let client = support::client();
    for port in ports {
        // Reserves 1, costs nothing: settled before its answer, which tells what is left.
        let answer = complete(&client, port, "k", 0, false, Some(1)).await;
        assert_eq!(answer.remaining, Some(100_000 - spent), "{answer:?}");
    }
    // A single answer tells what is left after its own cost.
    let answer = complete(&client, ports[1], "k", 123, false, None).await;
    assert_eq!(answer.remaining, Some(100_000 - spent - 123), "{answer:?}");
    assert!(Instant::now() < window_end, "the run outlasted its window");
}

/// A client that hangs up on a streamed answer is charged its estimate, not the answer's
/// cost (never told) nor nothing.
#[tokio::test]
async fn a_client_that_drops_a_streamed_answer_is_charged_its_estimate() {
    let redis = RedisServer::start();
    let vars = [("TOKEN_BUDGET", "10000/30s"), ("REDIS_URL", &redis.url())];
    let running = start(&vars);
    let window_end = fresh_window(Duration::from_secs(30), Duration::from_secs(10)).await;
    let client = support::client();
    let mut response = client
        .post(format!("http://127.0.0.1:{}/v1/complete", running.1))
        .header("x-api-key", "dropper")
        .header("x-estimated-tokens", "300")
        .body(r#"{"tokens": 10, "stream": true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.chunk().await.unwrap().is_some());
    drop(response);
    // The server sees the hang-up at its next chunk (every 25 ms), and settles then.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answer = complete(&client, running.1, "dropper", 0, false, Some(1)).await;
    assert_eq!(answer.remaining, Some(10_000 - 300), "{answer:?}");
    // One read to the end is charged what it tells.
    let answer = complete(&client, running.1, "dropper", 10, true, Some(300)).await;
    assert_eq!(answer.remaining, Some(10_000 - 300 - 300), "{answer:?}");
    let answer = complete(&client, running.1, "dropper", 0, false, Some(1)).await;
    assert_eq!(answer.remaining, Some(10_000 - 300 - 10), "{answer:?}");
    assert!(Instant::now() < window_end, "the run outlasted its window");
}

/// A body that is not `{"tokens": N, "stream": bool}` gets 400, and costs nothing; a request
/// without `x-api-key`, or with an estimate that is not a number, gets 400 from the limiter.
/// On memory, without `REDIS_URL`.
#[tokio::test]
async fn what_is_not_the_json_gets_400_and_costs_nothing() {
    let running = start(&[("TOKEN_BUDGET", "1000/1h")]);
    let client = support::client();
    for bad in [
        "junk",
        "",
        r#"{"tokens": "5"}"#,
        r#"{"tokens": -1, "stream": false}"#,
        r#"{"stream": true}"#,
        r#"{"tokens": 5, "stream": "yes"}"#,
        "[5, true]",
    ] {
        let answer = send(&client, running.1, "json", bad.to_owned(), None).await;
        assert_eq!(answer.status, 400, "{bad:?}");
        assert_eq!(answer.remaining, Some(1000), "{bad:?}: settled at 0");
    }
    let url = format!("http://127.0.0.1:{}/v1/complete", running.1);
    let keyless = client
        .post(&url)
        .body(r#"{"tokens": 5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(keyless.status(), 400);
    let answer = complete(&client, running.1, "json", 5, false, None).await;
    assert_eq!((answer.status, answer.remaining), (200, Some(995)));
    let bad_estimate = (client.post(&url))
        .header("x-api-key", "json")
        .header("x-estimated-tokens", "many")
        .body(r#"{"tokens": 5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(bad_estimate.status(), 400);
}
