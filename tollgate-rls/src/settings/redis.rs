//! Where Redis is, as the reference describes it: `REDIS_URL`, `REDIS_TYPE`,
//! `REDIS_SOCKET_TYPE`, `REDIS_AUTH`, `REDIS_SENTINEL_AUTH`, `REDIS_TLS*`, `REDIS_POOL_SIZE`;
//! and how it is tried at start (`REDIS_STARTUP_*`).

use std::time::Duration;

use super::error::SettingsError;
use super::vars::Vars;

/// Where Redis is and how it is reached. Whether the address holds together is for the store
/// to say when it is built (`store/redis.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Redis {
    /// The head of its variables' names: `REDIS`, or `REDIS_PERSECOND` for the per-second
    /// Redis (`persecond.rs`), for the messages that name them.
    pub(crate) names: &'static str,
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
}

/// How the store is tried at start: waits from `initial` doubling up to `max`, with jitter;
/// after `max_elapsed` (zero: never) without an answer the server exits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartupRetry {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
    pub(crate) max_elapsed: Duration,
}

/// Redis as `vars` describe it; `None` without `REDIS_URL`.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Option<Redis>, SettingsError> {
    let Some(url) = vars.set("REDIS_URL") else {
        return Ok(None);
    };
    Ok(Some(Redis {
        names: "REDIS",
        url,
        kind: vars.get("REDIS_TYPE", "single").to_ascii_lowercase(),
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
    }))
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

    fn read_from(vars: &[(&str, &str)]) -> Result<Option<Redis>, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    /// The reference's `src/settings/settings.go`: `REDIS_POOL_SIZE` defaults to 10.
    #[test]
    fn the_redis_pool_size() {
        let redis = |vars: &[(&str, &str)]| read_from(vars).map(|r| r.unwrap().pool_size);
        assert_eq!(redis(&[("REDIS_URL", "h:1")]), Ok(10));
        assert_eq!(
            redis(&[("REDIS_URL", "h:1"), ("REDIS_POOL_SIZE", "3")]),
            Ok(3)
        );
        let e = redis(&[("REDIS_URL", "h:1"), ("REDIS_POOL_SIZE", "0")]).unwrap_err();
        assert!(e.starts_with("REDIS_POOL_SIZE="), "{e}");
    }

    #[test]
    fn no_url_no_redis() {
        assert!(read_from(&[]).unwrap().is_none());
        assert!(read_from(&[("REDIS_URL", " ")]).unwrap().is_none());
        let r = read_from(&[("REDIS_URL", "redis:6379"), ("REDIS_SOCKET_TYPE", "TCP")]);
        let r = r.unwrap().unwrap();
        assert_eq!((r.url.as_str(), r.kind.as_str()), ("redis:6379", "single"));
        assert_eq!(r.socket_type, "tcp");
    }
}
