//! Run with `cargo bench --bench outage_latency` (needs `redis-server` on the PATH).
//!
//! Measures what a Redis outage costs each request: it starts a private redis-server, serves an
//! axum app limited through it, then hangs Redis with SIGSTOP and times requests over loopback
//! before and after the circuit breaker opens, and how long limiting takes to resume after
//! SIGCONT. Prints a Markdown table.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use tollgate::store::RedisStore;
use tollgate::{key, Quota, RateLimitLayer};

#[tokio::main]
async fn main() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server on the PATH");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let store = RedisStore::from_url(&format!("redis://127.0.0.1:{port}")).expect("url");
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_second(1_000_000).unwrap())
        .key(key::Global)
        .store(store)
        .build()
        .expect("layer");
    let layer_handle = layer.clone();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve")
    });
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let url = format!("http://{addr}/");
    let time = |n: usize| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut took = Vec::with_capacity(n);
            for _ in 0..n {
                let start = Instant::now();
                let r = client.get(&url).send().await.expect("request");
                assert!(r.status().is_success());
                took.push(start.elapsed());
            }
            took
        }
    };
    time(200).await; // warm up connections and scripts
    let healthy = time(1000).await;

    signal("-STOP", redis.id());
    let mut before_open = Vec::new();
    while !layer_handle.control().stats().circuit_open {
        before_open.extend(time(1).await);
    }
    let open = time(1000).await;

    signal("-CONT", redis.id());
    let resumed = Instant::now();
    let errors = layer_handle.control().stats().store_errors;
    loop {
        let r = client.get(&url).send().await.expect("request");
        if r.headers().contains_key("ratelimit") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let recovery = resumed.elapsed();
    let _ = redis.kill();
    let _ = redis.wait();

    println!("| Redis | requests | median | p99 | max |");
    println!("|---|---|---|---|---|");
    row("healthy", &healthy);
    row(
        "hung, breaker closed (each waits for the 50 ms timeout)",
        &before_open,
    );
    row("hung, breaker open", &open);
    println!();
    println!(
        "store errors counted: {errors}; limiting resumed {:.0} ms after SIGCONT (next probe)",
        recovery.as_secs_f64() * 1e3
    );
}

fn signal(signal: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {signal} {pid}");
}

fn row(label: &str, took: &[Duration]) {
    let mut sorted = took.to_vec();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize];
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    println!(
        "| {label} | {} | {} | {} | {} |",
        sorted.len(),
        ms(at(0.5)),
        ms(at(0.99)),
        ms(at(1.0))
    );
}
