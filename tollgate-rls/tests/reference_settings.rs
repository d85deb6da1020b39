//! The reference's variables (`src/settings/settings.go`, envoyproxy/ratelimit at f2fb157),
//! tried from outside against the built binary: each is read or logged once as ignored; values
//! the reference takes are taken, and values that stop it stop tollgate-rls too, naming the
//! variable.

mod support;

use std::path::Path;
use std::process::Command;

use support::{run_to_exit, Rls, Runtime};

fn runtime(test: &str) -> Runtime {
    Runtime::with(test, &["runtime/current/ratelimit/config/basic.yaml"])
}

/// `scripts/reference_vars.sh` lists every variable of the reference's `settings.go` (the list
/// kept in `tests/rls/reference/`) and finds each one read or logged as ignored by the
/// settings' code; none is neither.
#[test]
fn every_reference_variable_is_read_or_logged_as_ignored() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash")
        .arg(root.join("scripts/reference_vars.sh"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with("114 variables in the reference's settings.go:")
            && summary.ends_with(", 0 neither"),
        "{summary}"
    );
    assert!(
        stdout.contains("\nignored  LOCAL_CACHE_SIZE_IN_BYTES\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\nread     REDIS_HEALTH_CHECK_ACTIVE_CONNECTION\n"));
}

/// Set variables that are not used are logged once each, with why.
#[test]
fn ignored_variables_are_logged_once() {
    let runtime = runtime("ignored-logged");
    let rls = Rls::start(
        &runtime,
        &[
            ("LOCAL_CACHE_SIZE_IN_BYTES", "1000000"),
            ("MEMCACHE_TLS", "true"),
            ("REDIS_TLS_CACERT", "/nonexistent/ca.pem"),
        ],
    );
    let stderr = rls.stderr();
    for name in [
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "MEMCACHE_TLS",
        "REDIS_TLS_CACERT",
    ] {
        let logged = format!("{name} is ignored: ");
        assert_eq!(stderr.matches(&logged).count(), 1, "{name}: {stderr}");
    }
}

/// Values the reference takes start tollgate-rls: any `LOG_FORMAT` (text unless `json`,
/// runner.go lines 159-167), `REDIS_TLS_CACERT` without `REDIS_TLS` (read only with it,
/// settings.go `RedisTlsConfig`), `REDIS_POOL_ON_EMPTY_BEHAVIOR=WAIT`, and a negative
/// `REDIS_CLUSTER_PIPELINE_PARALLELISM` when Redis is not a cluster (driver_impl.go checks it
/// on a cluster only).
#[test]
fn values_the_reference_takes_are_taken() {
    let runtime = runtime("taken");
    for env in [
        vec![("LOG_FORMAT", "logfmt")],
        vec![("REDIS_TLS_CACERT", "/nonexistent/ca.pem")],
        vec![("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT")],
        vec![("REDIS_CLUSTER_PIPELINE_PARALLELISM", "-1")],
        vec![("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2")],
    ] {
        let rls = Rls::start(&runtime, &env);
        assert!(
            rls.line.contains("listening on"),
            "{env:?}: {}",
            rls.stderr()
        );
    }
}

/// Values that stop the reference stop tollgate-rls (status 2, naming the variable):
/// `REDIS_POOL_ON_EMPTY_BEHAVIOR` `CREATE` and `ERROR` (driver_impl.go lines 227-240), a
/// negative `REDIS_CLUSTER_PIPELINE_PARALLELISM` on a cluster (lines 85-88), and values
/// envconfig cannot read as their type (`settings.go`'s `NewSettings` panics on them).
/// memcached over TLS, which tollgate-rls cannot do, stops it too.
#[test]
fn values_the_reference_refuses_are_refused() {
    let runtime = runtime("refused");
    let redis = [("REDIS_URL", "127.0.0.1:1")];
    for (env, name) in [
        (
            vec![("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE")],
            "REDIS_POOL_ON_EMPTY_BEHAVIOR=",
        ),
        (
            vec![("REDIS_POOL_ON_EMPTY_BEHAVIOR", "error")],
            "REDIS_POOL_ON_EMPTY_BEHAVIOR=",
        ),
        (
            vec![
                ("REDIS_CLUSTER_PIPELINE_PARALLELISM", "-2"),
                ("REDIS_TYPE", "cluster"),
            ],
            "REDIS_CLUSTER_PIPELINE_PARALLELISM=",
        ),
        (
            vec![("MEMCACHE_MAX_IDLE_CONNS", "lots")],
            "MEMCACHE_MAX_IDLE_CONNS=",
        ),
        (
            vec![("REDIS_PIPELINE_WINDOW", "soon")],
            "REDIS_PIPELINE_WINDOW=",
        ),
        (
            vec![
                ("BACKEND_TYPE", "memcache"),
                ("MEMCACHE_HOST_PORT", "127.0.0.1:11211"),
                ("MEMCACHE_TLS", "true"),
            ],
            "MEMCACHE_TLS=true",
        ),
    ] {
        let mut env = env;
        if !env.iter().any(|(k, _)| *k == "BACKEND_TYPE") {
            env.extend(redis);
        }
        let (status, stderr) = run_to_exit(&runtime.root, &env);
        assert_eq!(status.code(), Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(name), "{env:?}: {stderr}");
    }
}

/// With `REDIS_URL` unset (and `BACKEND_TYPE` the reference's `redis`), tollgate-rls dials the
/// reference's default, `/var/run/nutcracker/ratelimit.sock` (settings.go), as the reference
/// does, instead of deciding in memory in each instance; a Redis that never answers there
/// stops it after `REDIS_STARTUP_MAX_ELAPSED_TIME`, naming the socket.
#[test]
fn without_redis_url_the_references_default_socket_is_dialed() {
    let runtime = runtime("default-url");
    let (status, stderr) = run_to_exit(
        &runtime.root,
        &[
            ("BACKEND_TYPE", "redis"),
            ("REDIS_STARTUP_INITIAL_INTERVAL", "50ms"),
            ("REDIS_STARTUP_MAX_ELAPSED_TIME", "300ms"),
        ],
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/var/run/nutcracker/ratelimit.sock"),
        "{stderr}"
    );
    assert!(stderr.contains("REDIS_URL"), "{stderr}");
}
