//! The built `tollgate-rls`'s listeners, as clients meet them: `TCP_NODELAY` on every accepted
//! connection (no 40 ms stall), a finite number of streams per HTTP/2
//! connection, a GOAWAY after `GRPC_MAX_CONNECTION_AGE`, time limits on slow HTTP clients,
//! host names, IPv6 and a Unix socket as addresses, and health as the reference reports it.

mod support;

use std::time::{Duration, Instant};

use support::{ask, eventually, http, request, RedisServer, Rls, Runtime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_rls::proto::rate_limit_response::Code;
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const ONE_LIMIT: &str = "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 100000 }
";

fn runtime(test: &str) -> Runtime {
    let runtime = Runtime::new(test);
    runtime.write("edge.yaml", ONE_LIMIT);
    runtime
}

/// Whether the server's end of the connection `client` made has `TCP_NODELAY` set: the
/// server's socket is borrowed from its process (`pidfd_getfd`; the test runs as the same
/// user) and found by its peer address, the client's own.
fn server_side_nodelay(pid: u32, client: &TcpStream) -> bool {
    use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
    let ours = client.local_addr().unwrap();
    let pid = Pid::from_raw(pid as i32).expect("a process id");
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).expect("pidfd_open");
    let mut found = None;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        if !target.to_string_lossy().starts_with("socket:") {
            continue;
        }
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(copy) = pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()) else {
            continue;
        };
        let socket = std::net::TcpStream::from(copy);
        if socket.peer_addr().ok() == Some(ours) {
            found = Some(socket.nodelay().unwrap());
        }
    }
    found.expect("the server's end of the connection")
}

/// Envoy keeps one long-lived connection to its rate limit service with few requests in
/// flight. Without `TCP_NODELAY` on the accepted socket an answer written in pieces waits
/// for the client's delayed ACK (the issue measured a p99 of 42 ms at 4 in flight, against
/// 0.3 ms for limitador); so every listener sets it on every connection it accepts.
#[tokio::test]
async fn every_accepted_connection_has_tcp_nodelay() {
    let runtime = runtime("nodelay");
    let rls = Rls::start(&runtime, &[]);
    for (name, addr) in [("gRPC", rls.grpc), ("HTTP", rls.http), ("debug", rls.debug)] {
        let client = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            server_side_nodelay(rls.pid(), &client),
            "{name}: the accepted connection has no TCP_NODELAY"
        );
    }
}

/// An HTTP/2 client connection to `addr`, driven until the server's SETTINGS have arrived:
/// how many streams the server allows, and the connection to drive on.
async fn h2_connection(
    addr: std::net::SocketAddr,
) -> (
    u32,
    h2::client::SendRequest<bytes::Bytes>,
    h2::client::Connection<TcpStream>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, mut connection) = h2::client::handshake(tcp).await.unwrap();
    // The server's SETTINGS arrive with the first frames it sends.
    let _ = tokio::time::timeout(Duration::from_millis(300), &mut connection).await;
    (
        connection.max_concurrent_send_streams() as u32,
        send,
        connection,
    )
}

/// A finite number of streams per connection (hyper's own default is 200; tonic's, none),
/// settable; and the reference's `GRPC_MAX_CONNECTION_AGE`/`_GRACE` (its
/// `src/server/server_impl.go`, `keepalive.ServerParameters`): a connection that old is sent a
/// GOAWAY and closed once idle, so Envoy's long-lived connections spread over new instances.
#[tokio::test]
async fn streams_per_connection_are_finite_and_an_old_connection_is_sent_a_goaway() {
    let runtime = runtime("streams");
    let rls = Rls::start(&runtime, &[]);
    let (streams, _send, _connection) = h2_connection(rls.grpc).await;
    assert_eq!(streams, 1024, "the default");
    drop(rls);

    let rls = Rls::start(
        &runtime,
        &[
            ("GRPC_MAX_CONCURRENT_STREAMS", "7"),
            ("GRPC_MAX_CONNECTION_AGE", "1s"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "1s"),
        ],
    );
    let started = Instant::now();
    let (streams, send, connection) = h2_connection(rls.grpc).await;
    assert_eq!(streams, 7);
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    let took = started.elapsed();
    assert!(
        matches!(ended, Ok(Ok(()))),
        "closed gracefully by the server: {ended:?}"
    );
    assert!(
        took >= Duration::from_millis(900),
        "not before its age: {took:?}"
    );
    drop(send);
}

/// A client that sends its request's head slowly is cut off after the header timeout (5 s);
/// one that sends a head and then too little body gets 408 after the request timeout (10 s).
#[tokio::test]
async fn slow_http_clients_are_cut_off() {
    let runtime = runtime("slow");
    let rls = Rls::start(&runtime, &[]);
    let head_only = async {
        let mut tcp = TcpStream::connect(rls.http).await.unwrap();
        tcp.write_all(b"POST /json HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(15), tcp.read_to_end(&mut buf)).await;
        (started.elapsed(), read.is_ok())
    };
    let short_body = async {
        let mut tcp = TcpStream::connect(rls.http).await.unwrap();
        tcp.write_all(b"POST /json HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"domain\"")
            .await
            .unwrap();
        let started = Instant::now();
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(15), tcp.read(&mut buf)).await;
        let n = n.ok().and_then(Result::ok).unwrap_or(0);
        (
            started.elapsed(),
            String::from_utf8_lossy(&buf[..n]).into_owned(),
        )
    };
    let ((head_took, closed), (body_took, answer)) = tokio::join!(head_only, short_body);
    assert!(closed, "the connection was closed");
    assert!(
        head_took >= Duration::from_secs(4) && head_took < Duration::from_secs(8),
        "head timeout after {head_took:?}"
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    assert!(
        body_took >= Duration::from_secs(9) && body_took < Duration::from_secs(13),
        "request timeout after {body_took:?}"
    );
}

/// The reference joins `*_HOST` and the port with Go's `net.JoinHostPort` and listens there:
/// a host name or an IPv6 address works (`src/server/server_impl.go`, `newServer`).
#[tokio::test]
async fn host_names_and_ipv6_addresses_are_listened_on() {
    let runtime = runtime("hosts");
    let rls = Rls::start(
        &runtime,
        &[
            ("GRPC_HOST", "::1"),
            ("HOST", "localhost"),
            ("DEBUG_HOST", "[::1]"),
        ],
    );
    assert!(rls.line.contains(" grpc=[::1]:"), "{}", rls.line);
    assert!(rls.line.contains(" debug=[::1]:"), "{}", rls.line);
    assert!(rls.http.ip().is_loopback(), "{}", rls.line);
    let mut client = rls.client().await;
    let r = ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    assert_eq!(r.statuses[0].limit_remaining, 99_999);
    let health = http()
        .get(format!("http://{}/healthcheck", rls.http))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}

/// `GRPC_UDS`: gRPC on a Unix socket instead of `GRPC_HOST:GRPC_PORT`, as the reference's
/// `server_impl.go` listens with `net.Listen("unix", …)`.
#[tokio::test]
async fn grpc_over_a_unix_socket() {
    let runtime = runtime("uds");
    let socket = runtime.root.join("rls.sock");
    let socket_env = socket.display().to_string();
    let rls = Rls::start(&runtime, &[("GRPC_UDS", socket_env.as_str())]);
    assert!(
        rls.line.contains(&format!(" grpc=unix:{socket_env} ")),
        "{}",
        rls.line
    );
    let path = socket.clone();
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let r = ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, 99_999);
}

async fn health_client(rls: &Rls) -> Option<HealthClient<Channel>> {
    let endpoint = Channel::from_shared(format!("http://{}", rls.grpc)).ok()?;
    Some(HealthClient::new(endpoint.connect().await.ok()?))
}

async fn grpc_health(rls: &Rls) -> Option<i32> {
    let mut client = health_client(rls).await?;
    let request = HealthCheckRequest {
        service: "ratelimit".into(),
    };
    Some(client.check(request).await.ok()?.into_inner().status)
}

async fn healthcheck(rls: &Rls) -> u16 {
    let url = format!("http://{}/healthcheck", rls.http);
    http().get(url).send().await.unwrap().status().as_u16()
}

/// The reference's start and health: nothing listens before Redis has answered a PING
/// (`src/service_cmd/runner/runner.go` creates the limiter, whose `NewClientImpl` in
/// `src/redis/driver_impl.go` retries until Redis answers, before `srv.Start`), and health is
/// then SERVING (`src/server/health.go`: the Redis part turns healthy once Redis answered);
/// SIGTERM fails the `sigterm` part, so the status is NOT_SERVING from the signal on, while
/// requests in flight finish.
#[tokio::test]
async fn nothing_listens_before_redis_answers_and_health_fails_from_the_stop_signal() {
    let mut redis = RedisServer::not_started();
    let runtime = runtime("health");
    let url = redis.url();
    let mut starting = Rls::spawn(
        &runtime,
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_STARTUP_INITIAL_INTERVAL", "100ms"),
            ("REDIS_STARTUP_MAX_INTERVAL", "200ms"),
        ],
    );
    assert!(
        !starting.listens_within(Duration::from_millis(800)),
        "listening before Redis answers"
    );
    assert!(
        starting.stderr().contains("did not answer"),
        "{}",
        starting.stderr()
    );

    redis.launch();
    let rls = starting.listening(Duration::from_secs(10));
    let not_serving = ServingStatus::NotServing as i32;
    let serving = ServingStatus::Serving as i32;
    assert_eq!(grpc_health(&rls).await, Some(serving));
    assert_eq!(healthcheck(&rls).await, 200);

    let mut watch = health_client(&rls).await.unwrap();
    let request = HealthCheckRequest {
        service: "ratelimit".into(),
    };
    let mut updates = watch.watch(request).await.unwrap().into_inner();
    let first = updates.message().await.unwrap().unwrap();
    assert_eq!(first.status, serving);
    rls.signal_stop();
    let next = tokio::time::timeout(Duration::from_secs(2), updates.message()).await;
    let status = next.ok().and_then(Result::ok).flatten().map(|r| r.status);
    assert_eq!(status, Some(not_serving), "NOT_SERVING before the drain");
}

/// `REDIS_STARTUP_MAX_ELAPSED_TIME`: past it without an answer the reference stops
/// (`driver_impl.go`, `retryOrDie` panics); so does tollgate-rls, with status 1.
#[tokio::test]
async fn a_redis_that_never_answers_within_the_startup_time_stops_the_server() {
    let redis = RedisServer::not_started();
    let runtime = runtime("startup");
    let url = redis.url();
    let (status, stderr) = support::run_to_exit(
        &runtime.root,
        &[
            ("REDIS_URL", url.as_str()),
            ("REDIS_STARTUP_INITIAL_INTERVAL", "100ms"),
            ("REDIS_STARTUP_MAX_ELAPSED_TIME", "500ms"),
        ],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("REDIS_STARTUP_MAX_ELAPSED_TIME"),
        "{stderr}"
    );
}

/// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true`: health follows Redis, as the reference's pool
/// trace fails the Redis part when its last connection closes and heals it at the next one
/// (`src/redis/driver_impl.go`, `poolTrace`); without it a Redis outage leaves health alone
/// (the part turns healthy once, at start).
#[tokio::test]
async fn with_the_active_connection_check_health_follows_redis() {
    let mut redis = RedisServer::start();
    let runtime = runtime("health-follows");
    let url = redis.url();
    let env = |follow| {
        [
            ("REDIS_URL", url.clone()),
            ("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", String::from(follow)),
            ("STORE_TIMEOUT", "100ms".to_owned()),
        ]
    };
    let following = env("true");
    let following: Vec<(&str, &str)> = following.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let rls = Rls::start(&runtime, &following);
    let not_following = env("false");
    let not_following: Vec<(&str, &str)> = not_following
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .collect();
    let plain = Rls::start(&runtime, &not_following);
    assert_eq!(healthcheck(&rls).await, 200);
    let serving = ServingStatus::Serving as i32;
    let not_serving = ServingStatus::NotServing as i32;

    redis.stop();
    let down = eventually(Duration::from_secs(5), || async {
        healthcheck(&rls).await == 500 && grpc_health(&rls).await == Some(not_serving)
    })
    .await;
    assert!(down, "health fails while Redis is down");
    assert_eq!(healthcheck(&plain).await, 200, "the reference's default");

    redis.launch();
    let up = eventually(Duration::from_secs(5), || async {
        healthcheck(&rls).await == 200 && grpc_health(&rls).await == Some(serving)
    })
    .await;
    assert!(up, "health follows Redis back");
}

/// `/healthcheck` answers every method, as the reference's router path does
/// (`src/server/server_impl.go`: `router.Path("/healthcheck").Handler(...)`, no method).
#[tokio::test]
async fn the_healthcheck_answers_every_method() {
    let runtime = runtime("health-methods");
    let rls = Rls::start(&runtime, &[]);
    let url = format!("http://{}/healthcheck", rls.http);
    for method in ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"] {
        let method = http::Method::from_bytes(method.as_bytes()).unwrap();
        let answer = http().request(method.clone(), &url).send().await.unwrap();
        assert_eq!(answer.status(), 200, "{method}");
    }
}

/// SIGHUP stops the server gracefully, as SIGTERM and SIGINT do: the reference's runner
/// cancels its context on each of the three (`src/service_cmd/runner/runner.go`,
/// `signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)`) and stops its
/// servers; the exit status is 0.
#[tokio::test]
async fn sighup_stops_gracefully() {
    let runtime = runtime("sighup");
    let rls = Rls::start(&runtime, &[]);
    assert_eq!(healthcheck(&rls).await, 200);
    let status = rls.stop_with("-HUP");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

/// A gRPC C-core client (python grpcio) on `GRPC_UDS`, with the default authority it gives a
/// `unix:` target (the socket's path, percent-encoded, which h2 alone refuses with
/// RST_STREAM PROTOCOL_ERROR), gets the reference's answers, as from the reference's grpc-go
/// server, which takes any authority.
#[test]
fn a_c_core_client_on_the_unix_socket_gets_ok() {
    let runtime = Runtime::with(
        "uds-python",
        &[
            "runtime/current/ratelimit/config/basic.yaml",
            "runtime/current/ratelimit/config/another.yaml",
        ],
    );
    let socket = runtime.root.join("rls.sock").display().to_string();
    let rls = Rls::start(
        &runtime,
        &[
            ("GRPC_UDS", socket.as_str()),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ],
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/envoy_client.py");
    for target in [format!("unix:{socket}"), format!("unix://{socket}")] {
        let out = std::process::Command::new("python3")
            .args([script, &target])
            .output()
            .expect("python3 must be installed");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("No module named 'grpc'"),
            "the Python client needs grpcio: pip install grpcio (scripts/test.sh does)"
        );
        assert!(out.status.success(), "{target}: {stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
    }
    drop(rls);
}

/// `GRPC_UDS` with `GRPC_SERVER_USE_TLS`: TLS on the Unix socket, as the reference's grpc-go
/// serves its credentials on whichever listener it has (`src/server/server_impl.go`, lines
/// 261-283 and 202-219).
#[tokio::test]
async fn tls_on_the_unix_socket() {
    let runtime = runtime("uds-tls");
    let dir = &runtime.root;
    tollgate_test_kit::make_signed_certificate(dir);
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let socket = runtime.root.join("rls.sock");
    let (cert_env, key_env, socket_env) = (
        cert.display().to_string(),
        key.display().to_string(),
        socket.display().to_string(),
    );
    let rls = Rls::start(
        &runtime,
        &[
            ("GRPC_UDS", socket_env.as_str()),
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", cert_env.as_str()),
            ("GRPC_SERVER_TLS_KEY", key_env.as_str()),
        ],
    );
    let ca = tonic::transport::Certificate::from_pem(std::fs::read(dir.join("ca.pem")).unwrap());
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(ca)
        .domain_name("127.0.0.1");
    let path = socket.clone();
    let channel = tonic::transport::Endpoint::from_static("https://127.0.0.1")
        .tls_config(tls)
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let r = ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert!(rls.line.contains(" grpc=unix:"), "{}", rls.line);
}
