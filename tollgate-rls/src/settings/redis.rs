//! Where Redis is, as the reference describes it: `REDIS_URL`, `REDIS_TYPE`,
//! `REDIS_SOCKET_TYPE`, `REDIS_AUTH`, `REDIS_SENTINEL_AUTH`, `REDIS_TLS*`, `REDIS_POOL_SIZE`,
//! `REDIS_POOL_ON_EMPTY_BEHAVIOR` and `REDIS_CLUSTER_PIPELINE_PARALLELISM` (checked as the
//! reference checks them); how it is tried at start (`REDIS_STARTUP_*`); and whether health
//! follows it (`REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`).

use std::time::Duration;

use super::error::SettingsError;
use super::ignored::parse_go_int;
use super::vars::Vars;

/// `REDIS_URL` when it is not set: the reference's default, a twemproxy (nutcracker) socket
/// (`src/settings/settings.go`), dialed over a Unix socket (`REDIS_SOCKET_TYPE`'s default).
pub(crate) const DEFAULT_URL: &str = "/var/run/nutcracker/ratelimit.sock";

/// Where Redis is and how it is reached. Whether the address holds together is for the store
/// to say when it is built (`store/redis.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Redis {
    /// `REDIS_URL`: `host:port`, a comma-separated list (cluster, sentinel), a socket path,
    /// or `redis://` / `rediss://` URLs.
    pub(crate) url: String,
    /// `single`, `sentinel` or `cluster`.
    pub(crate) kind: String,
    pub(crate) socket_type: String,
    pub(crate) auth: String,
    pub(crate) sentinel_auth: String,
    pub(crate) tls: bool,
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`: the chain is still verified.
    pub(crate) tls_skip_hostname: bool,
    /// `REDIS_TLS_CACERT`, `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY`: file paths, empty
    /// when unset.
    pub(crate) tls_cacert: String,
    pub(crate) tls_client_cert: String,
    pub(crate) tls_client_key: String,
    /// `REDIS_POOL_SIZE` (the reference's default, 10).
    pub(crate) pool_size: usize,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: health fails while Redis does not answer.
    pub(crate) health_follows: bool,
}

/// How the store is tried at start: waits from `initial` doubling up to `max`, with jitter;
/// after `max_elapsed` (zero: never) without an answer the server exits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartupRetry {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
    pub(crate) max_elapsed: Duration,
}

/// Redis as `vars` describe it: at `REDIS_URL`, or at the reference's default
/// ([`DEFAULT_URL`]) when it is not set.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Redis, SettingsError> {
    let url = vars
        .set("REDIS_URL")
        .unwrap_or_else(|| DEFAULT_URL.to_owned());
    let kind = vars.get("REDIS_TYPE", "single").to_ascii_lowercase();
    refuse_what_the_reference_refuses(vars, &kind)?;
    Ok(Redis {
        url,
        kind,
        socket_type: vars.get("REDIS_SOCKET_TYPE", "unix").to_ascii_lowercase(),
        auth: vars.get("REDIS_AUTH", ""),
        sentinel_auth: vars.get("REDIS_SENTINEL_AUTH", ""),
        tls: vars.flag("REDIS_TLS", false)?,
        tls_skip_hostname: vars.flag("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)?,
        tls_cacert: vars.get("REDIS_TLS_CACERT", ""),
        tls_client_cert: vars.get("REDIS_TLS_CLIENT_CERT", ""),
        tls_client_key: vars.get("REDIS_TLS_CLIENT_KEY", ""),
        pool_size: vars.parsed(
            "REDIS_POOL_SIZE",
            10,
            |v| v.trim().parse().ok().filter(|n| *n > 0),
            "expected a number of connections above zero",
        )?,
        health_follows: vars.flag("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?,
    })
}

/// What stops the reference at start (`src/redis/driver_impl.go`, `newClientImpl`): its pool
/// has neither of the `CREATE` and `ERROR` behaviours of `REDIS_POOL_ON_EMPTY_BEHAVIOR` (any
/// other value is accepted, as `WAIT`), and on a cluster a negative
/// `REDIS_CLUSTER_PIPELINE_PARALLELISM` panics (`effectiveClusterPipelineParallelism`).
fn refuse_what_the_reference_refuses(vars: &Vars<'_>, kind: &str) -> Result<(), SettingsError> {
    let on_empty = vars.get("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT");
    if matches!(on_empty.to_ascii_uppercase().as_str(), "CREATE" | "ERROR") {
        return Err(SettingsError::invalid(
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            on_empty,
            "expected WAIT: CREATE and ERROR stop the reference at start (its Redis pool has \
             neither); raise REDIS_POOL_SIZE instead, and STORE_TIMEOUT bounds every call",
        ));
    }
    let parallelism = vars.var("REDIS_CLUSTER_PIPELINE_PARALLELISM");
    if let Some(v) = parallelism.filter(|_| kind == "cluster") {
        if parse_go_int(&v).is_some_and(|n| n < 0) {
            return Err(SettingsError::invalid(
                "REDIS_CLUSTER_PIPELINE_PARALLELISM",
                v,
                "expected 0 or more, as the reference requires on a cluster",
            ));
        }
    }
    Ok(())
}

/// `REDIS_STARTUP_INITIAL_INTERVAL`, `_MAX_INTERVAL`, `_MAX_ELAPSED_TIME`: how the store is
/// tried at start until it answers (health is NOT_SERVING until then).
pub(crate) fn startup(vars: &Vars<'_>) -> Result<StartupRetry, SettingsError> {
    Ok(StartupRetry {
        initial: vars.duration("REDIS_STARTUP_INITIAL_INTERVAL", Duration::from_secs(1))?,
        max: vars.duration("REDIS_STARTUP_MAX_INTERVAL", Duration::from_secs(30))?,
        max_elapsed: vars.duration("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO)?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Redis, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    /// The reference's `src/settings/settings.go`: `REDIS_POOL_SIZE` defaults to 10.
    #[test]
    fn the_redis_pool_size() {
        let redis = |vars: &[(&str, &str)]| read_from(vars).map(|r| r.pool_size);
        assert_eq!(redis(&[("REDIS_URL", "h:1")]), Ok(10));
        assert_eq!(
            redis(&[("REDIS_URL", "h:1"), ("REDIS_POOL_SIZE", "3")]),
            Ok(3)
        );
        let e = redis(&[("REDIS_URL", "h:1"), ("REDIS_POOL_SIZE", "0")]).unwrap_err();
        assert!(e.starts_with("REDIS_POOL_SIZE="), "{e}");
    }

    /// The reference's `settings.go`: `REDIS_URL` defaults to
    /// `/var/run/nutcracker/ratelimit.sock`, `REDIS_SOCKET_TYPE` to `unix`.
    #[test]
    fn no_url_is_the_references_socket() {
        let r = read_from(&[]).unwrap();
        assert_eq!(
            (r.url.as_str(), r.socket_type.as_str()),
            (DEFAULT_URL, "unix")
        );
        assert_eq!(read_from(&[("REDIS_URL", " ")]).unwrap().url, DEFAULT_URL);
        let r = read_from(&[("REDIS_URL", "redis:6379"), ("REDIS_SOCKET_TYPE", "TCP")]);
        let r = r.unwrap();
        assert_eq!((r.url.as_str(), r.kind.as_str()), ("redis:6379", "single"));
        assert_eq!(r.socket_type, "tcp");
    }

    /// The reference's `src/redis/driver_impl.go`: `REDIS_POOL_ON_EMPTY_BEHAVIOR` `CREATE`
    /// and `ERROR` panic at start (lines 227-240), and so does a negative
    /// `REDIS_CLUSTER_PIPELINE_PARALLELISM` on a cluster (lines 85-88, 194-196); anything else
    /// is taken.
    #[test]
    fn what_the_reference_refuses_is_refused() {
        for v in ["CREATE", "error"] {
            let e = read_from(&[("REDIS_POOL_ON_EMPTY_BEHAVIOR", v)]).unwrap_err();
            assert!(e.starts_with("REDIS_POOL_ON_EMPTY_BEHAVIOR="), "{e}");
        }
        assert!(read_from(&[("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT")]).is_ok());
        assert!(read_from(&[("REDIS_POOL_ON_EMPTY_BEHAVIOR", "whatever")]).is_ok());
        let negative = ("REDIS_CLUSTER_PIPELINE_PARALLELISM", "-1");
        let e = read_from(&[negative, ("REDIS_TYPE", "cluster")]).unwrap_err();
        assert!(
            e.starts_with("REDIS_CLUSTER_PIPELINE_PARALLELISM=\"-1\""),
            "{e}"
        );
        assert!(read_from(&[negative]).is_ok());
        let r = read_from(&[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")]);
        assert!(r.unwrap().health_follows);
    }
}
