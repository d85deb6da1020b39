//! tollgate-rls as Envoy Gateway runs the reference: limits from an xDS control plane
//! (`CONFIG_TYPE=GRPC_XDS_SOTW`, the reference's `src/provider/xds_grpc_sotw_provider.go`),
//! gRPC over mutual TLS both ways, and the rest of the environment Envoy Gateway's
//! `internal/infrastructure/kubernetes/ratelimit/resource.go` sets. The control plane is
//! written here (`control_plane/`), over mutual TLS, and pushes versions the binary must
//! follow, ACK or NACK.

mod control_plane;
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use control_plane::{limit, ControlPlane, Pki, Reply};
use support::{free_port, request, Rls, Runtime, HOSTS};
use tollgate_rls::proto::rate_limit_response::Code;
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::proto::RateLimitRequest;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// What Envoy Gateway sets (its resource.go), with the files and addresses of this test;
/// the xDS backoff is shortened so that a reconnection takes a moment, not 10 s.
fn envoy_gateway_env(pki: &Pki, control_plane: &str, redis: &str) -> Vec<(String, String)> {
    let vars = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_owned()),
        ("CONFIG_GRPC_XDS_SERVER_URL", control_plane.to_owned()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".to_owned()),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_owned()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", pki.path("rls.crt")),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", pki.path("rls.key")),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", pki.path("ca.crt")),
        ("GRPC_SERVER_USE_TLS", "true".to_owned()),
        ("GRPC_SERVER_TLS_CERT", pki.path("rls.crt")),
        ("GRPC_SERVER_TLS_KEY", pki.path("rls.key")),
        // Envoy Gateway's name for the CA (resource.go, GRPCServerTLSCACertEnvVar).
        ("GRPC_SERVER_TLS_CA_CERT", pki.path("ca.crt")),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".to_owned()),
        ("USE_STATSD", "false".to_owned()),
        ("USE_PROMETHEUS", "true".to_owned()),
        // Envoy Gateway's is ":19001"; a free port here, as tests run side by side.
        ("PROMETHEUS_ADDR", format!(":{}", free_port())),
        ("LOG_LEVEL", "info".to_owned()),
        ("BACKEND_TYPE", "redis".to_owned()),
        ("REDIS_SOCKET_TYPE", "tcp".to_owned()),
        ("REDIS_URL", redis.to_owned()),
        ("RUNTIME_ROOT", "/data".to_owned()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_owned()),
        ("RUNTIME_IGNOREDOTFILES", "true".to_owned()),
        ("RUNTIME_WATCH_ROOT", "false".to_owned()),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".to_owned()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "500ms".to_owned()),
    ];
    vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn start(env: &[(String, String)]) -> Rls {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Rls::start(&Runtime::new("envoy-gateway"), &env)
}

/// The Redis of this test run, as Envoy Gateway names it: `host:port`.
fn redis_address() -> String {
    let url = support::shared_redis_url();
    url.trim_start_matches("redis://").to_owned()
}

/// A gRPC client over TLS, with the client certificate `name` (`None`: without one).
async fn client(
    rls: &Rls,
    pki: &Pki,
    name: Option<&str>,
) -> Result<RateLimitServiceClient<Channel>, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(pki.read("ca.crt")))
        .domain_name("localhost");
    if let Some(name) = name {
        tls = tls.identity(Identity::from_pem(
            pki.read(&format!("{name}.crt")),
            pki.read(&format!("{name}.key")),
        ));
    }
    let channel = Channel::from_shared(format!("https://{}", rls.grpc))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(RateLimitServiceClient::new(channel))
}

/// The answer to one request, or the gRPC error.
async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> Result<(Code, Option<u32>), tonic::Status> {
    let response = client.should_rate_limit(request).await?.into_inner();
    let status = &response.statuses[0];
    Ok((
        response.overall_code(),
        status.current_limit.as_ref().map(|l| l.requests_per_unit),
    ))
}

/// Waits (up to 5 s) until a request for `key` is limited at `per_minute`.
async fn wait_for_limit(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    key: &str,
    per_minute: u32,
) -> Duration {
    let start = Instant::now();
    loop {
        let decided = ask(client, request(domain, &[&[(key, "probe")]])).await;
        if matches!(decided, Ok((_, Some(n))) if n == per_minute) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{key} not limited at {per_minute} within 5 s: {decided:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `per_minute` requests for `key` pass and the next is over the limit: the version is the
/// one deciding, exactly.
async fn assert_exact(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    key: &str,
    per_minute: u32,
) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let value = format!(
        "exact-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let codes: Vec<Code> = {
        let mut codes = Vec::new();
        for _ in 0..=per_minute {
            let (code, _) = ask(client, request(domain, &[&[(key, &value)]]))
                .await
                .unwrap();
            codes.push(code);
        }
        codes
    };
    let mut expected = vec![Code::Ok; per_minute as usize];
    expected.push(Code::OverLimit);
    assert_eq!(codes, expected, "{key}");
}

async fn wait_for_replies(cp: &ControlPlane, count: usize) -> Vec<Reply> {
    let start = Instant::now();
    loop {
        let replies = cp.replies();
        if replies.len() >= count || start.elapsed() > Duration::from_secs(5) {
            return replies;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn follows_the_control_plane_acks_nacks_and_reconnects() {
    let pki = Pki::new("follows");
    let cp_addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let domain = format!("eg-{}", std::process::id());
    let env = envoy_gateway_env(
        &pki,
        &format!("localhost:{}", cp_addr.port()),
        &redis_address(),
    );

    // FORCE_START_WITHOUT_INITIAL_CONFIG: serving before any control plane exists, with the
    // reference's answer (service.go: checkServiceErr(snappedConfig != nil, ..), a plain
    // error, UNKNOWN on the wire).
    let rls = start(&env);
    let mut envoy = client(&rls, &pki, Some("envoy")).await.unwrap();
    let none = ask(&mut envoy, request(&domain, &[&[("v1", "a")]]))
        .await
        .unwrap_err();
    assert_eq!(none.code(), tonic::Code::Unknown);
    assert_eq!(none.message(), "no rate limit configuration loaded");

    // Version 1, then 2: each followed within seconds, ACKed with its version.
    let cp = ControlPlane::start(cp_addr, &pki);
    cp.push("1", vec![limit(&domain, "v1", 2)]);
    let took = wait_for_limit(&mut envoy, &domain, "v1", 2).await;
    println!("version 1 in force {took:?} after the control plane started");
    assert_exact(&mut envoy, &domain, "v1", 2).await;
    cp.push("2", vec![limit(&domain, "v2", 3)]);
    let took = wait_for_limit(&mut envoy, &domain, "v2", 3).await;
    println!("version 2 in force {took:?} after it was pushed");
    assert_exact(&mut envoy, &domain, "v2", 3).await;
    let (_, v1) = ask(&mut envoy, request(&domain, &[&[("v1", "a")]]))
        .await
        .unwrap();
    assert_eq!(v1, None, "version 1's limit is gone with version 2");

    // A bad version 3 is NACKed with the reason and version 2 keeps serving.
    let mut bad = limit(&domain, "v3", 1);
    bad.descriptors[0].rate_limit.as_mut().unwrap().unit = 0;
    cp.push("3", vec![bad]);
    let replies = wait_for_replies(&cp, 3).await;
    assert_eq!(replies.len(), 3, "{replies:?}");
    let versions: Vec<_> = replies
        .iter()
        .map(|r| (r.version.as_str(), r.error.is_some()))
        .collect();
    assert_eq!(
        versions,
        [("1", false), ("2", false), ("2", true)],
        "{replies:?}"
    );
    assert_eq!(
        replies[2].error.as_deref(),
        Some(format!("{domain}-v3: invalid rate limit unit 'UNKNOWN'").as_str())
    );
    assert_eq!(cp.nodes()[0], "envoy-ratelimit");
    assert_exact(&mut envoy, &domain, "v2", 3).await;

    // The control plane is killed and comes back with version 4: reconnected, followed.
    cp.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_exact(&mut envoy, &domain, "v2", 3).await;
    let cp = ControlPlane::start(cp_addr, &pki);
    cp.push("4", vec![limit(&domain, "v4", 4)]);
    let took = wait_for_limit(&mut envoy, &domain, "v4", 4).await;
    println!("version 4 in force {took:?} after the control plane came back");
    assert_exact(&mut envoy, &domain, "v4", 4).await;
    let replies = wait_for_replies(&cp, 1).await;
    assert_eq!(replies[0].version, "4");
    assert_eq!(replies[0].error, None);
    assert!(rls.stderr().contains("not loaded: "), "the NACK is logged");

    // USE_PROMETHEUS: the metrics on PROMETHEUS_ADDR too, counting the loads (3 good, 1 bad).
    let port = env
        .iter()
        .find(|(k, _)| k == "PROMETHEUS_ADDR")
        .unwrap()
        .1
        .clone();
    let text = reqwest::get(format!("http://127.0.0.1{port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("ratelimit_service_config_load_success 3"),
        "{text}"
    );
    assert!(
        text.contains("ratelimit_service_config_load_error 1"),
        "{text}"
    );
}

#[tokio::test]
async fn serves_only_clients_with_a_valid_certificate() {
    let pki = Pki::new("clients");
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), &pki);
    let domain = format!("eg-certs-{}", std::process::id());
    cp.push("1", vec![limit(&domain, "k", 5)]);
    let mut env = envoy_gateway_env(
        &pki,
        &format!("localhost:{}", cp.addr.port()),
        &redis_address(),
    );
    env.push(("GRPC_CLIENT_TLS_SAN".into(), "envoy".into()));
    let rls = start(&env);

    let mut envoy = client(&rls, &pki, Some("envoy")).await.unwrap();
    wait_for_limit(&mut envoy, &domain, "k", 5).await;
    for name in [None, Some("rogue"), Some("other")] {
        let refused = match client(&rls, &pki, name).await {
            Err(_) => true,
            Ok(mut c) => ask(&mut c, request(&domain, &[&[("k", "x")]]))
                .await
                .is_err(),
        };
        assert!(refused, "a client with {name:?} was served");
    }
    // Plain text to a TLS port is no gRPC either.
    let plain = RateLimitServiceClient::connect(format!("http://{}", rls.grpc)).await;
    if let Ok(mut plain) = plain {
        assert!(ask(&mut plain, request(&domain, &[&[("k", "x")]]))
            .await
            .is_err());
    }
    assert_eq!(
        ask(&mut envoy, request(&domain, &[&[("k", "x")]]))
            .await
            .unwrap()
            .0,
        Code::Ok
    );
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_a_restart() {
    let pki = Pki::new("rotation");
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), &pki);
    let domain = format!("eg-rotate-{}", std::process::id());
    cp.push("1", vec![limit(&domain, "k", 5)]);
    // The server's own copy of its certificate, replaced in place as Kubernetes does.
    for file in ["rls.crt", "rls.key"] {
        std::fs::copy(pki.dir.join(file), pki.dir.join(format!("served-{file}"))).unwrap();
    }
    let mut env = envoy_gateway_env(
        &pki,
        &format!("localhost:{}", cp.addr.port()),
        &redis_address(),
    );
    for (name, value) in &mut env {
        if name == "GRPC_SERVER_TLS_CERT" || name == "GRPC_SERVER_TLS_KEY" {
            *value = value.replace("rls.", "served-rls.");
        }
    }
    let rls = start(&env);
    let served = || served_subject(&pki, &rls);
    assert!(served().contains("CN=rls"), "{}", served());
    pki.leaf(
        "ca",
        "rotated",
        "rotated-rls",
        "DNS:localhost,IP:127.0.0.1",
        "serverAuth",
    );
    for file in ["crt", "key"] {
        let tmp = pki.dir.join(format!("tmp.{file}"));
        std::fs::copy(pki.dir.join(format!("rotated.{file}")), &tmp).unwrap();
        std::fs::rename(&tmp, pki.dir.join(format!("served-rls.{file}"))).unwrap();
    }
    let start = Instant::now();
    while !served().contains("CN=rotated-rls") {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "still {}",
            served()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "rotated certificate served {:?} after the files changed",
        start.elapsed()
    );
    let mut envoy = client(&rls, &pki, Some("envoy")).await.unwrap();
    wait_for_limit(&mut envoy, &domain, "k", 5).await;
}

/// The subject of the certificate the server presents, as openssl s_client sees it.
fn served_subject(pki: &Pki, rls: &Rls) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect {} -cert {} -key {} -CAfile {} </dev/null 2>/dev/null \
             | openssl x509 -noout -subject",
            rls.grpc,
            pki.path("envoy.crt"),
            pki.path("envoy.key"),
            pki.path("ca.crt"),
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).replace(' ', "")
}

#[tokio::test]
async fn without_force_start_it_waits_for_the_first_configuration() {
    let pki = Pki::new("wait");
    let cp_addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let domain = format!("eg-wait-{}", std::process::id());
    let mut env = envoy_gateway_env(
        &pki,
        &format!("127.0.0.1:{}", cp_addr.port()),
        &redis_address(),
    );
    env.retain(|(k, _)| k != "FORCE_START_WITHOUT_INITIAL_CONFIG");
    env.push(("CONFIG_GRPC_XDS_SERVER_TLS_SAN".into(), "localhost".into()));
    // The control plane comes 700 ms after the start; the `listening` line waits for its set.
    let (pki_dir, cp_domain) = (pki.dir.clone(), domain.clone());
    let later = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        let cp = ControlPlane::start_in(cp_addr, &pki_dir);
        cp.push("1", vec![limit(&cp_domain, "k", 1)]);
        cp
    });
    let started = Instant::now();
    let rls = start(&env);
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    let _cp = later.join().unwrap();
    let mut envoy = client(&rls, &pki, Some("envoy")).await.unwrap();
    let first = ask(&mut envoy, request(&domain, &[&[("k", "a")]]))
        .await
        .unwrap();
    assert_eq!(first, (Code::Ok, Some(1)));
}

/// The environment without the shortened `XDS_CLIENT_BACKOFF_*`: the reference's defaults.
fn with_the_references_backoff(mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    env.retain(|(k, _)| !k.starts_with("XDS_CLIENT_BACKOFF_"));
    env
}

/// When the control plane's streams `0..count` were opened (waits up to `within`).
async fn wait_for_subscriptions(cp: &ControlPlane, count: usize, within: Duration) -> Vec<Instant> {
    let start = Instant::now();
    loop {
        let opened = cp.subscriptions();
        if opened.len() >= count {
            return opened;
        }
        assert!(
            start.elapsed() < within,
            "{} stream(s) opened, not {count}, within {within:?}",
            opened.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Under Envoy Gateway the rate limit pod often starts before the control plane. The
/// reference dials with `grpc.Dial(.., grpc.WithBlock())` (src/provider/xds_grpc_sotw_provider.go
/// lines 126-146), which keeps trying on gRPC's connection back-off (1 s, then ×1.6 with ±20 %
/// jitter, up to 120 s: grpc/grpc doc/connection-backoff.md, grpc-go internal/backoff), and
/// uses its `XDS_CLIENT_BACKOFF_*` wait (10 s) only after a stream breaks (lines 68-91, 112-124).
/// So the first configuration is in force within about a second of the control plane
/// listening. Here `localhost` resolves to `::1` first, where nothing listens, then to
/// 127.0.0.1, where the control plane does (as in most systems' /etc/hosts): every address is
/// tried, as gRPC does.
#[tokio::test]
async fn a_control_plane_that_starts_later_is_followed_within_2_s_of_listening() {
    let pki = Pki::new("later");
    let cp_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let domain = format!("eg-later-{}", std::process::id());
    let hosts = pki.dir.join("hosts");
    std::fs::write(&hosts, "::1 localhost\n127.0.0.1 localhost\n").unwrap();
    let mut env = with_the_references_backoff(envoy_gateway_env(
        &pki,
        &format!("localhost:{}", cp_addr.port()),
        &redis_address(),
    ));
    env.push((HOSTS.into(), hosts.to_string_lossy().into_owned()));

    let started = Instant::now();
    let rls = start(&env);
    let mut envoy = client(&rls, &pki, Some("envoy")).await.unwrap();
    tokio::time::sleep_until((started + Duration::from_secs(2)).into()).await;
    let cp = ControlPlane::start(cp_addr, &pki);
    let listening = Instant::now();
    cp.push("1", vec![limit(&domain, "k", 2)]);
    wait_for_limit(&mut envoy, &domain, "k", 2).await;
    let took = listening.elapsed();
    println!(
        "control plane listening {:?} after tollgate-rls started; first configuration in \
         force {took:?} after it listened",
        listening - started
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_exact(&mut envoy, &domain, "k", 2).await;
    let log = rls.stderr();
    assert!(
        log.contains("cannot connect"),
        "dialed before it listened: {log}"
    );
    assert!(
        !log.contains("control plane again in"),
        "no reconnection wait: {log}"
    );
}

/// After an established stream breaks, the reference sleeps jpillora/backoff's `Duration()`
/// and dials again (src/provider/xds_grpc_sotw_provider.go lines 71-90 and 112-118). It
/// passes `XDS_CLIENT_BACKOFF_RANDOM_FACTOR` as jpillora's `Factor`, the multiplier (line 74):
/// with its defaults (10 s, 60 s, 0.5, jitter), `10 s × 0.5^n` is below the minimum and jitter
/// picks between the two, so every wait is 10 s (jpillora/backoff v1.0.0 backoff.go:42-80),
/// the second as the first.
#[tokio::test]
async fn a_broken_stream_is_opened_again_after_the_references_10_s() {
    let pki = Pki::new("broken");
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), &pki);
    let domain = format!("eg-broken-{}", std::process::id());
    cp.push("1", vec![limit(&domain, "v1", 5)]);
    let env = with_the_references_backoff(envoy_gateway_env(
        &pki,
        &format!("localhost:{}", cp.addr.port()),
        &redis_address(),
    ));
    let rls = start(&env);
    let mut envoy = client(&rls, &pki, Some("envoy")).await.unwrap();
    wait_for_limit(&mut envoy, &domain, "v1", 5).await;
    for (n, version) in [(1, "2"), (2, "3")] {
        let cut = cp.cut_streams();
        let key = format!("v{version}");
        cp.push(version, vec![limit(&domain, &key, 3)]);
        let opened = wait_for_subscriptions(&cp, n + 1, Duration::from_secs(15)).await[n];
        let waited = opened - cut;
        println!("stream {n} broken: opened again {waited:?} later");
        assert!(
            waited >= Duration::from_secs(10) && waited < Duration::from_millis(10_800),
            "{waited:?}"
        );
        wait_for_limit(&mut envoy, &domain, &key, 3).await;
    }
    assert!(rls.stderr().contains("again in 10.00s"), "{}", rls.stderr());
}

/// The same jpillora/backoff with a factor above 1 (src/provider/xds_grpc_sotw_provider.go
/// lines 71-76): each wait is the last one multiplied, up to the maximum, and the count of
/// attempts is never reset (the reference never calls `Reset`), even after a stream that
/// delivered a set.
#[tokio::test]
async fn the_reconnection_wait_grows_by_the_factor_up_to_the_maximum() {
    let pki = Pki::new("factor");
    let cp = ControlPlane::start("127.0.0.1:0".parse().unwrap(), &pki);
    let domain = format!("eg-factor-{}", std::process::id());
    cp.push("1", vec![limit(&domain, "v1", 5)]);
    let mut env = with_the_references_backoff(envoy_gateway_env(
        &pki,
        &format!("localhost:{}", cp.addr.port()),
        &redis_address(),
    ));
    for (name, value) in [
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "300ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s"),
        ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
        ("XDS_CLIENT_BACKOFF_JITTER", "false"),
    ] {
        env.push((name.into(), value.into()));
    }
    let rls = start(&env);
    let mut envoy = client(&rls, &pki, Some("envoy")).await.unwrap();
    wait_for_limit(&mut envoy, &domain, "v1", 5).await;
    for (n, expected) in [(1, 300), (2, 600), (3, 1000), (4, 1000)] {
        let cut = cp.cut_streams();
        let key = format!("v{}", n + 1);
        cp.push(&(n + 1).to_string(), vec![limit(&domain, &key, 3)]);
        let opened = wait_for_subscriptions(&cp, n + 1, Duration::from_secs(5)).await[n];
        let waited = opened - cut;
        println!("stream {n} broken: opened again {waited:?} later (wait {expected} ms)");
        let expected = Duration::from_millis(expected);
        assert!(
            waited >= expected && waited < expected + Duration::from_millis(500),
            "{waited:?}"
        );
        wait_for_limit(&mut envoy, &domain, &key, 3).await;
    }
}
