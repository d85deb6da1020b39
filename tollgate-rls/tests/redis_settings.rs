//! Every Redis setting of the reference's environment honoured by the built binary against real
//! servers: `REDIS_AUTH` on a Unix socket, on a URL and on a Sentinel's master (with
//! `REDIS_SENTINEL_AUTH` for the sentinel), `REDIS_TLS_CACERT` for a private CA, mutual TLS with
//! `REDIS_TLS_CLIENT_CERT`/`_KEY`, and `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`, which skips the
//! name check only. A memcached setting stops the start, and no secret is printed.
//!
//! The reference reads these in `src/settings/settings.go` (`REDIS_AUTH`, `REDIS_TLS_*`,
//! `REDIS_SENTINEL_AUTH`, `BACKEND_TYPE`), splits `REDIS_AUTH` at its first colon into user and
//! password and gives the sentinels their own dialer with `REDIS_SENTINEL_AUTH`
//! (`src/redis/driver_impl.go`, `createDialer`), builds the TLS configuration in
//! `src/utils/tls.go` (`TlsConfigFromFiles`: with skip-hostname it turns Go's checks off and
//! verifies the chain itself, with no name), and picks the store in
//! `src/service_cmd/runner/runner.go` (`switch s.BackendType`).

mod support;

use std::path::Path;
use std::process::Command;

use support::{free_port, redis_cli, request, run_to_exit, temp_dir, Rls, Runtime, Spawned};
use tollgate_rls::proto::rate_limit_response::Code;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const CONFIG: &str = "domain: settings\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n";

fn runtime(test: &str) -> Runtime {
    let runtime = Runtime::new(test);
    runtime.write("settings.yaml", CONFIG);
    runtime
}

/// A redis-server on a plain loopback `port` with `extra` arguments, in a directory of its own.
fn redis_server(port: u16, extra: &[&str]) -> Spawned {
    let port_arg = port.to_string();
    let mut args = vec!["--port", &port_arg, "--bind", "127.0.0.1", "--save", ""];
    args.extend(["--appendonly", "no"]);
    args.extend(extra);
    Spawned::start("redis-server", &args, temp_dir("redis-settings-node"), port)
}

/// Keys on the Redis at `port` (plain, with `password`).
fn keys(port: u16, password: &str) -> Vec<String> {
    let mut args = vec![];
    if !password.is_empty() {
        args.extend(["-a", password, "--no-auth-warning"]);
    }
    args.extend(["KEYS", "*"]);
    (redis_cli(port, &args).lines())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// How one request was answered.
#[derive(Debug, PartialEq)]
enum Answer {
    /// Redis decided: the overall code, with the limit.
    Decided(i32),
    /// The store failed: the gRPC error (the reference's answer, `ON_STORE_ERROR`'s default).
    Failed(tonic::Code),
}

/// Three requests of one user at a limit of 2 per minute, as answered.
async fn three(rls: &Rls, user: &str) -> Vec<Answer> {
    let mut client = rls.client().await;
    let mut answers = Vec::new();
    for _ in 0..3 {
        let asked = client
            .should_rate_limit(request("settings", &[&[("user", user)]]))
            .await;
        answers.push(match asked {
            Ok(r) if r.get_ref().statuses[0].current_limit.is_some() => {
                Answer::Decided(r.get_ref().overall_code)
            }
            Ok(r) => panic!("an answer without the limit: {r:?}"),
            Err(status) => Answer::Failed(status.code()),
        });
    }
    answers
}

/// Decisions reached Redis: the third request is over the limit and the counter is there.
async fn assert_decided_in_redis(rls: &Rls, user: &str, port: u16, password: &str) {
    let answers = three(rls, user).await;
    assert_eq!(
        answers,
        [
            Answer::Decided(OK),
            Answer::Decided(OK),
            Answer::Decided(OVER)
        ],
        "stderr: {}",
        rls.stderr()
    );
    let keys = keys(port, password);
    assert!(keys.iter().any(|k| k.contains(user)), "keys: {keys:?}");
}

/// A Redis that never answers at start (a TLS handshake or credentials it refuses): nothing
/// listens, as in the reference (its `driver_impl.go` retries until `REDIS_STARTUP_MAX_ELAPSED_TIME`,
/// then stops), the exit is status 1 naming the store, and nothing was counted.
fn assert_never_served(runtime: &Runtime, env: &[(&str, &str)], port: u16, password: &str) {
    let mut env = env.to_vec();
    env.extend([
        ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "1s"),
    ]);
    let before = keys(port, password);
    let (status, stderr) = support::run_to_exit(&runtime.root, &env);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("did not answer within REDIS_STARTUP_MAX_ELAPSED_TIME"),
        "{stderr}"
    );
    assert_eq!(keys(port, password), before, "nothing counted");
}

/// Nothing the binary `printed` holds any of `secrets`.
fn assert_no_secret(printed: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !printed.contains(secret),
            "{secret:?} printed in:\n{printed}"
        );
    }
}

#[tokio::test]
async fn a_unix_socket_with_a_password() {
    let dir = temp_dir("redis-settings-unix");
    let socket = dir.join("redis.sock");
    let port = free_port();
    let socket_arg = socket.to_str().unwrap();
    let _redis = redis_server(
        port,
        &[
            "--unixsocket",
            socket_arg,
            "--unixsocketperm",
            "700",
            "--requirepass",
            "uNix-pw",
        ],
    );
    let runtime = runtime("unix-auth");
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_SOCKET_TYPE", "unix"),
            ("REDIS_URL", socket_arg),
            ("REDIS_AUTH", "uNix-pw"),
            ("STORE_TIMEOUT", "2s"),
        ],
    );
    assert_decided_in_redis(&rls, "unix", port, "uNix-pw").await;
    assert_no_secret(&format!("{}\n{}", rls.line, rls.stderr()), &["uNix-pw"]);
    let _ = std::fs::remove_dir_all(dir);
}

/// `REDIS_AUTH` on a `redis://` URL with no credentials of its own; the password holds a comma
/// and an `@`, and the ACL form `user:password` works too.
#[tokio::test]
async fn a_url_with_redis_auth() {
    let port = free_port();
    let redis = redis_server(port, &["--requirepass", "root,p@ss"]);
    let acl = redis_cli(
        port,
        &[
            "-a",
            "root,p@ss",
            "--no-auth-warning",
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">app,pw",
            "~*",
            "+@all",
        ],
    );
    assert_eq!(acl.trim(), "OK");
    let runtime = runtime("url-auth");
    let url = format!("redis://127.0.0.1:{port}");
    for (auth, user) in [("root,p@ss", "url"), ("app:app,pw", "acl")] {
        let rls = Rls::start(
            &runtime,
            &[
                ("REDIS_URL", &url),
                ("REDIS_AUTH", auth),
                ("STORE_TIMEOUT", "2s"),
            ],
        );
        assert_decided_in_redis(&rls, user, port, "root,p@ss").await;
        assert_no_secret(
            &format!("{}\n{}", rls.line, rls.stderr()),
            &["root,p@ss", "p@ss", "app,pw"],
        );
    }
    drop(redis);
}

/// The reference gives the sentinels a dialer of their own with `REDIS_SENTINEL_AUTH` and the
/// master the pool's dialer with `REDIS_AUTH` (`src/redis/driver_impl.go`, `case "sentinel"`).
#[tokio::test]
async fn a_sentinel_whose_master_has_a_password() {
    let master_port = free_port();
    let _master = redis_server(master_port, &["--requirepass", "master-pw"]);
    let sentinel_port = free_port();
    let sentinel_dir = temp_dir("redis-settings-sentinel-conf");
    let config = format!(
        "port {sentinel_port}\nbind 127.0.0.1\nrequirepass sentinel-pw\n\
         sentinel monitor tollgate 127.0.0.1 {master_port} 1\n\
         sentinel auth-pass tollgate master-pw\n"
    );
    std::fs::write(sentinel_dir.join("sentinel.conf"), config).unwrap();
    let _sentinel = Spawned::start(
        "redis-server",
        &["sentinel.conf", "--sentinel"],
        sentinel_dir,
        sentinel_port,
    );
    let runtime = runtime("sentinel-auth");
    let url = format!("tollgate,127.0.0.1:{sentinel_port}");
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &url),
            ("REDIS_AUTH", "master-pw"),
            ("REDIS_SENTINEL_AUTH", "sentinel-pw"),
            ("STORE_TIMEOUT", "2s"),
        ],
    );
    assert_decided_in_redis(&rls, "sentinel", master_port, "master-pw").await;
    assert_no_secret(
        &format!("{}\n{}", rls.line, rls.stderr()),
        &["master-pw", "sentinel-pw"],
    );
}

/// A private CA (`ca.pem`, `ca.key`) and another (`other-ca.pem`) in `dir`; `leaf` signs a
/// certificate `NAME.pem`/`NAME.key` with the private CA.
struct Pki<'a>(&'a Path);

impl Pki<'_> {
    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.0)
            .output()
            .expect("openssl must be installed");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ca(&self, name: &str) {
        let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
        let subject = format!("/CN={name}");
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "1",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
    }

    fn new(dir: &Path) -> Pki<'_> {
        let pki = Pki(dir);
        pki.ca("ca");
        pki.ca("other-ca");
        pki
    }

    /// A certificate for `extensions` (e.g. `subjectAltName=IP:127.0.0.1`) signed by `ca.pem`.
    fn leaf(&self, name: &str, extensions: &str) {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        std::fs::write(self.0.join(&ext), format!("{extensions}\n")).unwrap();
        let subject = format!("/CN={name}");
        self.openssl(&[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj",
            &subject,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "1",
            "-extfile",
            &ext,
        ]);
    }

    fn path(&self, file: &str) -> String {
        self.0.join(file).to_str().unwrap().to_owned()
    }
}

/// A redis-server with a TLS port whose certificate is `server` (signed by the private CA), a
/// plain port for the test's own checks, and client certificates required or not.
fn tls_redis(pki: &Pki<'_>, server: &str, clients: &str) -> (Spawned, u16, u16) {
    let (tls_port, plain_port) = (free_port(), free_port());
    let (tls, cert, key, ca) = (
        tls_port.to_string(),
        pki.path(&format!("{server}.pem")),
        pki.path(&format!("{server}.key")),
        pki.path("ca.pem"),
    );
    let redis = redis_server(
        plain_port,
        &[
            "--tls-port",
            &tls,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            clients,
        ],
    );
    support::wait_for_port(tls_port);
    (redis, tls_port, plain_port)
}

#[tokio::test]
async fn tls_with_a_private_ca_and_with_client_certificates() {
    let dir = temp_dir("redis-settings-tls");
    let pki = Pki::new(&dir);
    pki.leaf(
        "server",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth",
    );
    pki.leaf("client", "extendedKeyUsage=clientAuth");
    let runtime = runtime("tls-ca");
    let (ca, cert, key) = (
        pki.path("ca.pem"),
        pki.path("client.pem"),
        pki.path("client.key"),
    );

    let (_redis, tls_port, plain_port) = tls_redis(&pki, "server", "no");
    let address = format!("127.0.0.1:{tls_port}");
    let tls = [
        ("REDIS_URL", address.as_str()),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TLS", "true"),
        ("STORE_TIMEOUT", "2s"),
    ];
    // Without the CA the private certificate is not trusted: every decision fails.
    assert_never_served(&runtime, &tls, plain_port, "");
    let with_ca = [&tls[..], &[("REDIS_TLS_CACERT", ca.as_str())]].concat();
    let rls = Rls::start(&runtime, &with_ca);
    assert_decided_in_redis(&rls, "private-ca", plain_port, "").await;

    // Mutual TLS: the server asks for a client certificate.
    let (_redis, tls_port, plain_port) = tls_redis(&pki, "server", "yes");
    let address = format!("127.0.0.1:{tls_port}");
    let mut with_ca = with_ca.clone();
    with_ca[0].1 = &address;
    assert_never_served(&runtime, &with_ca, plain_port, "");
    let mutual = [
        &with_ca[..],
        &[
            ("REDIS_TLS_CLIENT_CERT", cert.as_str()),
            ("REDIS_TLS_CLIENT_KEY", key.as_str()),
        ],
    ]
    .concat();
    let rls = Rls::start(&runtime, &mutual);
    assert_decided_in_redis(&rls, "mutual", plain_port, "").await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Under Sentinel, `REDIS_TLS` and the CA cover the sentinel and the master alike, as the
/// reference's one TLS dialer does (`src/redis/driver_impl.go`, `createDialer`).
#[tokio::test]
async fn a_sentinel_and_its_master_over_tls_with_a_private_ca() {
    let dir = temp_dir("redis-settings-sentinel-tls");
    let pki = Pki::new(&dir);
    pki.leaf(
        "server",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth",
    );
    let (_master, master_tls, master_plain) = tls_redis(&pki, "server", "no");
    let sentinel_port = free_port();
    let sentinel_dir = temp_dir("redis-settings-sentinel-tls-conf");
    let config = format!(
        "port 0\nbind 127.0.0.1\ntls-port {sentinel_port}\n\
         tls-cert-file {cert}\ntls-key-file {key}\ntls-ca-cert-file {ca}\n\
         tls-auth-clients no\ntls-replication yes\n\
         sentinel monitor tollgate 127.0.0.1 {master_tls} 1\n",
        cert = pki.path("server.pem"),
        key = pki.path("server.key"),
        ca = pki.path("ca.pem"),
    );
    std::fs::write(sentinel_dir.join("sentinel.conf"), config).unwrap();
    let _sentinel = Spawned::start(
        "redis-server",
        &["sentinel.conf", "--sentinel"],
        sentinel_dir,
        sentinel_port,
    );
    let runtime = runtime("sentinel-tls");
    let url = format!("tollgate,127.0.0.1:{sentinel_port}");
    let ca = pki.path("ca.pem");
    let rls = Rls::start(
        &runtime,
        &[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &url),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", &ca),
            ("STORE_TIMEOUT", "2s"),
        ],
    );
    assert_decided_in_redis(&rls, "sentinel-tls", master_plain, "").await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The server's certificate names `redis.internal`, not the address connected to. Skipping the
/// host name works with the right CA; with another CA the chain is still refused.
#[tokio::test]
async fn skip_hostname_verification_still_verifies_the_chain() {
    let dir = temp_dir("redis-settings-skip");
    let pki = Pki::new(&dir);
    pki.leaf(
        "named",
        "subjectAltName=DNS:redis.internal\nextendedKeyUsage=serverAuth",
    );
    let runtime = runtime("tls-skip");
    let (_redis, tls_port, plain_port) = tls_redis(&pki, "named", "no");
    let address = format!("127.0.0.1:{tls_port}");
    let (right, other) = (pki.path("ca.pem"), pki.path("other-ca.pem"));
    fn vars<'a>(address: &'a str, ca: &'a str, skip: &'a str) -> [(&'a str, &'a str); 6] {
        [
            ("REDIS_URL", address),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TLS", "true"),
            ("STORE_TIMEOUT", "2s"),
            ("REDIS_TLS_CACERT", ca),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", skip),
        ]
    }
    let start = |ca: &str, skip: &str| Rls::start(&runtime, &vars(&address, ca, skip));
    // The right CA, the name checked: the name does not match, so nothing is decided.
    assert_never_served(&runtime, &vars(&address, &right, "false"), plain_port, "");
    // The right CA, the name not checked: decided.
    let rls = start(&right, "true");
    assert_decided_in_redis(&rls, "name-skipped", plain_port, "").await;
    // Another CA, the name not checked: the chain is still verified, so nothing is decided.
    assert_never_served(&runtime, &vars(&address, &other, "true"), plain_port, "");
    let _ = std::fs::remove_dir_all(dir);
}

/// The reference's `runner.go` serves `BACKEND_TYPE=memcache` from the memcached servers its
/// settings name; one of these settings without the other stops the start (status 2) naming
/// the variable, instead of each instance counting alone (`tests/memcached.rs` runs the store).
#[test]
fn a_memcached_setting_alone_stops_the_start() {
    let runtime = runtime("memcache");
    for (name, value) in [
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", "127.0.0.1:11211"),
        ("MEMCACHE_SRV", "_memcache._tcp.example"),
    ] {
        let (status, stderr) = run_to_exit(&runtime.root, &[(name, value)]);
        assert_eq!(status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name), "{name}: {stderr}");
        assert!(stderr.contains("memcache"), "{stderr}");
    }
}

/// A password in the URL (holding a comma), in `?password=`, in a Unix socket's `?pass=`,
/// and in `REDIS_AUTH` with a comma is printed nowhere: not in the start-up line, not in any log
/// line, at the most verbose level.
#[tokio::test]
async fn no_secret_is_printed_whatever_the_url_form() {
    let port = free_port();
    let _redis = redis_server(port, &["--requirepass", "Se,cret1"]);
    let runtime = runtime("secrets");
    let in_url = format!("redis://:Se,cret1@127.0.0.1:{port}");
    let in_query = format!("redis://127.0.0.1:{port}/0?password=Qu,ery2");
    let in_socket = "redis+unix:///nonexistent/r.sock?pass=So,ck3";
    let list = format!("redis://:Li,st4@127.0.0.1:{port},redis://:Li,st4@127.0.0.1:{port}");
    for (vars, decided) in [
        (vec![("REDIS_URL", in_url.as_str())], true),
        (
            vec![("REDIS_URL", in_query.as_str()), ("REDIS_AUTH", "Se,cret1")],
            true,
        ),
        (vec![("REDIS_URL", in_socket)], false),
        (
            vec![("REDIS_URL", list.as_str()), ("REDIS_TYPE", "cluster")],
            false,
        ),
    ] {
        let mut vars = vars;
        vars.extend([("LOG_LEVEL", "debug"), ("STORE_TIMEOUT", "2s")]);
        let secrets = [
            "Se,cret1", "cret1", "Qu,ery2", "ery2", "So,ck3", "ck3", "Li,st4", "st4",
        ];
        if decided {
            let rls = Rls::start(&runtime, &vars);
            assert_decided_in_redis(&rls, "secrets", port, "Se,cret1").await;
            assert!(rls.line.contains("store=redis"), "{}", rls.line);
            assert_no_secret(&format!("{}\n{}", rls.line, rls.stderr()), &secrets);
        } else {
            // Never answered: the retries at start and the exit are logged, without a secret.
            vars.extend([
                ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
                ("REDIS_STARTUP_MAX_ELAPSED_TIME", "500ms"),
            ]);
            let (status, stderr) = support::run_to_exit(&runtime.root, &vars);
            assert_eq!(status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("redis ("), "{stderr}");
            assert_no_secret(&stderr, &secrets);
        }
        // Keys from one run do not carry over into the next.
        redis_cli(port, &["-a", "Se,cret1", "--no-auth-warning", "FLUSHALL"]);
    }
}
