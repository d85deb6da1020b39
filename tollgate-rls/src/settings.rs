//! The reference's environment (envoyproxy/ratelimit's `settings.go`): the same names and
//! defaults, so an existing deployment only swaps the image. Settings that make no sense here
//! are accepted and logged once as ignored; a bad value is an error that names it.

mod grpc_tls;
mod stats;
mod xds;

use std::path::PathBuf;
use std::time::Duration;

use tollgate::engine::Charging;
use tollgate_rls::XdsSource;
use tollgate::store::OnStoreError;

pub(crate) use grpc_tls::GrpcTls;
pub(crate) use stats::{Protocol, Statsd};

/// Everything the server reads from its environment.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) grpc_host: String,
    pub(crate) grpc_port: u16,
    pub(crate) debug_host: String,
    pub(crate) debug_port: u16,
    /// `GRPC_UDS`: gRPC on this Unix socket instead of `GRPC_HOST:GRPC_PORT`.
    pub(crate) grpc_uds: Option<PathBuf>,
    /// `GRPC_MAX_CONNECTION_AGE`: a connection older than this is sent a GOAWAY, so clients
    /// that keep theirs (Envoy) spread over new instances.
    pub(crate) grpc_max_connection_age: Duration,
    /// `GRPC_MAX_CONNECTION_AGE_GRACE`: how long its requests in flight may then take.
    pub(crate) grpc_max_connection_age_grace: Duration,
    /// `GRPC_MAX_CONCURRENT_STREAMS` (tollgate-rls's own): requests in flight on one HTTP/2
    /// connection.
    pub(crate) grpc_max_concurrent_streams: u32,
    /// `TOKIO_WORKER_THREADS` (tokio's own name): the async runtime's worker threads; unset,
    /// as `runtime.rs` chooses from the cores this process may use.
    pub(crate) worker_threads: Option<usize>,
    /// `REDIS_STARTUP_INITIAL_INTERVAL`, `_MAX_INTERVAL`, `_MAX_ELAPSED_TIME`: how the store is
    /// tried at start until it answers (health is NOT_SERVING until then).
    pub(crate) store_startup: StartupRetry,
    pub(crate) log_level: String,
    pub(crate) log_json: bool,
    /// `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY`.
    pub(crate) config_dir: PathBuf,
    /// `CONFIG_TYPE=GRPC_XDS_SOTW`: limits from this xDS control plane instead of the
    /// directory.
    pub(crate) xds: Option<XdsSource>,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`: serve before a configuration loads (answering
    /// errors until then) instead of waiting for the xDS control plane's first one, or exiting
    /// on configuration files that do not load.
    pub(crate) force_start: bool,
    /// `GRPC_SERVER_USE_TLS`: gRPC over TLS (mutual with `GRPC_CLIENT_TLS_CACERT`).
    pub(crate) grpc_tls: Option<GrpcTls>,
    pub(crate) ignore_dot_files: bool,
    pub(crate) merge_domains: bool,
    pub(crate) shadow_mode: bool,
    pub(crate) quota_mode: bool,
    pub(crate) dynamic_metadata: bool,
    pub(crate) healthy_with_config: bool,
    /// The three header names, when `LIMIT_RESPONSE_HEADERS_ENABLED`.
    pub(crate) headers: Option<[String; 3]>,
    pub(crate) redis: Option<Redis>,
    /// With `BACKEND_TYPE=memcache`: where the memcached servers are, in place of Redis.
    pub(crate) memcached: Option<Memcached>,
    /// `CACHE_KEY_PREFIX`: before every key, in Redis or memcached.
    pub(crate) key_prefix: String,
    pub(crate) store_timeout: Duration,
    /// `STATS_MAX_SERIES` (ours): how many statistics series request values may make.
    pub(crate) stats_max_series: usize,
    /// `NEAR_LIMIT_RATIO`: hits past this share of a limit count as near it.
    pub(crate) near_limit_ratio: f32,
    /// With `USE_PROMETHEUS`: `PROMETHEUS_ADDR` (Go's form, `:9090` for every interface) and
    /// `PROMETHEUS_PATH`, where the metrics are served too.
    pub(crate) prometheus: Option<(String, String)>,
    /// The statsd push (`USE_STATSD`, on unless set false, or `USE_DOG_STATSD`).
    pub(crate) statsd: Option<Statsd>,
    /// `None`: a failing store is answered with a gRPC error, as the reference answers.
    pub(crate) on_store_error: Option<OnStoreError>,
    /// Which hits are charged: `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, and tollgate's
    /// `CHARGE_REFUSED=false` (a refused request consumes nothing).
    pub(crate) charging: Charging,
    /// Set variables that are accepted and not used, with why.
    pub(crate) ignored: Vec<(String, &'static str)>,
}

/// How the store is tried at start: waits from `initial` doubling up to `max`, with jitter;
/// after `max_elapsed` (zero: never) without an answer the server exits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartupRetry {
    pub(crate) initial: Duration,
    pub(crate) max: Duration,
    pub(crate) max_elapsed: Duration,
}

/// Where Redis is, as the reference describes it.
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
    pub(crate) prefix: String,
}

/// Where the memcached servers of `BACKEND_TYPE=memcache` are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Memcached {
    /// `MEMCACHE_HOST_PORT`: the servers, `host:port` each.
    Servers(Vec<String>),
    /// `MEMCACHE_SRV`: the DNS SRV record that names them, looked up again every
    /// `MEMCACHE_SRV_REFRESH` (zero, the default: never).
    Srv { name: String, refresh: Duration },
}

/// Variables of the reference that tollgate-rls accepts and does not use, and why.
const IGNORED: &[(&str, &str)] = &[
    (
        "PROMETHEUS_MAPPER_YAML",
        "metrics are named as the reference's default mapping names them",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "metrics are named as the reference's default mapping names them",
    ),
    (
        "MEMCACHE_MAX_IDLE_CONNS",
        "each instance keeps up to 32 connections per memcached server",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "denials are always cached, exactly, until they expire",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "each key expires when its algorithm no longer needs it",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "one multiplexed connection pipelines every call",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "one multiplexed connection pipelines every call",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "one multiplexed connection pipelines every call",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection carries every call",
    ),
    ("REDIS_PERSECOND", "one Redis serves every unit"),
    ("REDIS_PERSECOND_URL", "one Redis serves every unit"),
    ("REDIS_PERSECOND_TYPE", "one Redis serves every unit"),
    ("REDIS_PERSECOND_AUTH", "one Redis serves every unit"),
    ("REDIS_PERSECOND_TLS", "one Redis serves every unit"),
    ("REDIS_PERSECOND_POOL_SIZE", "one Redis serves every unit"),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "a Redis outage is answered by ON_STORE_ERROR, not by failing health checks",
    ),
    (
        "RUNTIME_WATCH_ROOT",
        "the configuration directory is always watched, symlink swaps included",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "a failed connection to the xDS control plane waits XDS_CLIENT_BACKOFF_*",
    ),
    ("TRACING_ENABLED", "tracing is not exported"),
];

/// Requests in flight on one gRPC connection unless `GRPC_MAX_CONCURRENT_STREAMS` says
/// otherwise: finite (one connection cannot queue unbounded work), and far above what Envoy
/// keeps in flight on one connection.
pub(crate) const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 1024;

/// Variables that ask for something tollgate-rls cannot do: starting would be wrong.
const UNSUPPORTED: &[(&str, &str)] = &[];

impl Settings {
    /// Reads the process's environment.
    pub(crate) fn from_env() -> Result<Self, String> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `var` (the environment, or a map in tests).
    pub(crate) fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let get = |name: &str, default: &str| var(name).unwrap_or_else(|| default.to_owned());
        let flag = |name: &str, default: bool| match var(name) {
            None => Ok(default),
            Some(v) => {
                parse_bool(&v).ok_or_else(|| format!("{name}={v:?}: expected true or false"))
            }
        };
        let port = |name: &str, default: u16| match var(name) {
            None => Ok(default),
            Some(v) => v
                .parse::<u16>()
                .map_err(|_| format!("{name}={v:?}: expected a port from 0 to 65535")),
        };
        for (name, why) in UNSUPPORTED {
            if let Some(v) = var(name).filter(|v| !v.is_empty() && parse_bool(v) != Some(false)) {
                return Err(format!("{name}={v:?}: {why}"));
            }
        }
        let memcached = backend(&var)?;
        let xds = match get("CONFIG_TYPE", "FILE").as_str() {
            "FILE" => None,
            "GRPC_XDS_SOTW" => Some(xds::source(&var)?),
            other => {
                return Err(format!(
                    "CONFIG_TYPE={other:?}: expected FILE or GRPC_XDS_SOTW"
                ))
            }
        };
        let ignored = (IGNORED.iter())
            .filter(|(name, _)| var(name).is_some())
            .map(|(name, why)| ((*name).to_owned(), *why))
            .collect();
        let config_dir = PathBuf::from(get("RUNTIME_ROOT", "/srv/runtime_data/current"))
            .join(get("RUNTIME_SUBDIRECTORY", ""))
            .join(get("RUNTIME_APPDIRECTORY", "config"));
        let headers_on = flag("LIMIT_RESPONSE_HEADERS_ENABLED", false)?
            || flag("RESPONSE_HEADERS_ENABLED", false)?;
        let headers = headers_on.then(|| {
            [
                get("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
                get("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                get("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            ]
        });
        let redis = match var("REDIS_URL").filter(|u| !u.trim().is_empty()) {
            None => None,
            Some(url) => Some(Redis {
                url,
                kind: get("REDIS_TYPE", "single").to_ascii_lowercase(),
                socket_type: get("REDIS_SOCKET_TYPE", "unix").to_ascii_lowercase(),
                auth: get("REDIS_AUTH", ""),
                sentinel_auth: get("REDIS_SENTINEL_AUTH", ""),
                tls: flag("REDIS_TLS", false)?,
                tls_skip_hostname: flag("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)?,
                tls_cacert: get("REDIS_TLS_CACERT", ""),
                tls_client_cert: get("REDIS_TLS_CLIENT_CERT", ""),
                tls_client_key: get("REDIS_TLS_CLIENT_KEY", ""),
                pool_size: match var("REDIS_POOL_SIZE") {
                    None => 10,
                    Some(v) => v.trim().parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!(
                            "REDIS_POOL_SIZE={v:?}: expected a number of connections above zero"
                        )
                    })?,
                },
                prefix: get("CACHE_KEY_PREFIX", ""),
            }),
        };
        let duration = |name: &str, default: Duration| match var(name) {
            None => Ok(default),
            Some(v) => parse_duration(&v)
                .ok_or_else(|| format!("{name}={v:?}: expected a duration such as 50ms, 1s or 1h")),
        };
        let grpc_max_concurrent_streams = match var("GRPC_MAX_CONCURRENT_STREAMS") {
            None => DEFAULT_MAX_CONCURRENT_STREAMS,
            Some(v) => v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("GRPC_MAX_CONCURRENT_STREAMS={v:?}: expected a number from 1 to 4294967295")
            })?,
        };
        let worker_threads = match var("TOKIO_WORKER_THREADS") {
            None => None,
            Some(v) => Some(v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                format!("TOKIO_WORKER_THREADS={v:?}: expected a number of threads from 1")
            })?),
        };
        let store_timeout = match var("STORE_TIMEOUT").or_else(|| var("REDIS_TIMEOUT")) {
            None => Duration::from_millis(50),
            Some(v) => parse_duration(&v).filter(|d| !d.is_zero()).ok_or_else(|| {
                format!("STORE_TIMEOUT={v:?}: expected a duration above zero such as 50ms or 1s")
            })?,
        };
        let on_store_error = match get("ON_STORE_ERROR", "error").to_ascii_lowercase().as_str() {
            "error" => None,
            "open" | "allow" => Some(OnStoreError::Allow),
            "closed" | "deny" => Some(OnStoreError::Deny),
            "local" | "fallback" => Some(OnStoreError::FallbackToMemory),
            other => {
                return Err(format!(
                    "ON_STORE_ERROR={other:?}: expected error (answer UNAVAILABLE, as the \
                     reference), open (answer OK), closed (answer OVER_LIMIT) or local (decide \
                     in this process)"
                ))
            }
        };
        let stats_max_series = match var("STATS_MAX_SERIES") {
            None => 1_000,
            Some(v) => v.parse::<usize>().map_err(|_| {
                format!("STATS_MAX_SERIES={v:?}: expected a number of series such as 1000")
            })?,
        };
        let near_limit_ratio = match var("NEAR_LIMIT_RATIO") {
            None => 0.8,
            Some(v) => v.parse::<f32>().ok().filter(|r| *r >= 0.0).ok_or_else(|| {
                format!("NEAR_LIMIT_RATIO={v:?}: expected a share of the limit such as 0.8")
            })?,
        };
        let sinks = stats::read(&var)?;
        let charging = match (
            flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)?,
            flag("CHARGE_REFUSED", true)?,
        ) {
            (false, true) => Charging::EveryHit,
            (true, true) => Charging::StopWhenOverLimit,
            (false, false) => Charging::AllowedOnly,
            (true, false) => {
                return Err(
                    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true and CHARGE_REFUSED=false: \
                            pick one (the first charges the descriptors over their limit, the \
                            second charges nothing of a refused request)"
                        .into(),
                )
            }
        };
        let log_json = match get("LOG_FORMAT", "text").to_ascii_lowercase().as_str() {
            "text" => false,
            "json" => true,
            other => return Err(format!("LOG_FORMAT={other:?}: expected text or json")),
        };
        Ok(Self {
            host: get("HOST", "0.0.0.0"),
            port: port("PORT", 8080)?,
            grpc_host: get("GRPC_HOST", "0.0.0.0"),
            grpc_port: port("GRPC_PORT", 8081)?,
            debug_host: get("DEBUG_HOST", "0.0.0.0"),
            debug_port: port("DEBUG_PORT", 6070)?,
            grpc_uds: var("GRPC_UDS").filter(|p| !p.is_empty()).map(PathBuf::from),
            grpc_max_connection_age: duration(
                "GRPC_MAX_CONNECTION_AGE",
                Duration::from_secs(86_400),
            )?,
            grpc_max_connection_age_grace: duration(
                "GRPC_MAX_CONNECTION_AGE_GRACE",
                Duration::from_secs(3_600),
            )?,
            grpc_max_concurrent_streams,
            worker_threads,
            store_startup: StartupRetry {
                initial: duration("REDIS_STARTUP_INITIAL_INTERVAL", Duration::from_secs(1))?,
                max: duration("REDIS_STARTUP_MAX_INTERVAL", Duration::from_secs(30))?,
                max_elapsed: duration("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO)?,
            },
            log_level: get("LOG_LEVEL", "WARN"),
            log_json,
            config_dir,
            xds,
            force_start: flag("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
            grpc_tls: grpc_tls::read(&var)?,
            ignore_dot_files: flag("RUNTIME_IGNOREDOTFILES", false)?,
            merge_domains: flag("MERGE_DOMAIN_CONFIG", false)?,
            shadow_mode: flag("SHADOW_MODE", false)?,
            quota_mode: flag("QUOTA_MODE", false)?,
            dynamic_metadata: flag("RESPONSE_DYNAMIC_METADATA", false)?,
            healthy_with_config: flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
            headers,
            redis,
            memcached,
            key_prefix: get("CACHE_KEY_PREFIX", ""),
            store_timeout,
            on_store_error,
            stats_max_series,
            near_limit_ratio,
            prometheus: sinks.prometheus,
            statsd: sinks.statsd,
            charging,
            ignored,
        })
    }
}

/// The store `BACKEND_TYPE` names, as the reference's `runner.go` reads it: Redis (`redis`, or
/// empty; `None` here), or memcached (`memcache`) at the `host:port` servers of
/// `MEMCACHE_HOST_PORT` (a comma list, as its `settings.go` reads it) or of the DNS SRV record
/// `MEMCACHE_SRV`, looked up again every `MEMCACHE_SRV_REFRESH`. Everything else stops the
/// start, and so does a memcached setting without `BACKEND_TYPE=memcache`, rather than leave
/// each instance counting alone, and `MEMCACHE_SRV_REFRESH` without `MEMCACHE_SRV`.
fn backend(var: &impl Fn(&str) -> Option<String>) -> Result<Option<Memcached>, String> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let memcache = match var("BACKEND_TYPE").as_deref().map(str::trim) {
        None | Some("" | "redis") => false,
        Some("memcache") => true,
        Some(other) => {
            return Err(format!(
                "BACKEND_TYPE={other:?}: expected redis or memcache"
            ))
        }
    };
    if !memcache {
        for name in ["MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH"] {
            if set(name).is_some() {
                return Err(format!(
                    "{name} is set: memcached is used with BACKEND_TYPE=memcache only"
                ));
            }
        }
        return Ok(None);
    }
    // The reference's `newMemcacheFromSettings` (src/memcached/cache_impl.go) refuses both.
    match (set("MEMCACHE_HOST_PORT"), set("MEMCACHE_SRV")) {
        (Some(_), Some(_)) => {
            Err("MEMCACHE_HOST_PORT and MEMCACHE_SRV are both set: set one".into())
        }
        (None, Some(name)) => {
            let refresh = match set("MEMCACHE_SRV_REFRESH") {
                None => Duration::ZERO,
                Some(v) => parse_duration(&v).ok_or_else(|| {
                    format!("MEMCACHE_SRV_REFRESH={v:?}: expected a duration such as 30s or 5m")
                })?,
            };
            Ok(Some(Memcached::Srv {
                name: name.trim().to_owned(),
                refresh,
            }))
        }
        (Some(_), None) if set("MEMCACHE_SRV_REFRESH").is_some() => Err(
            "MEMCACHE_SRV_REFRESH is set: it refreshes the servers of MEMCACHE_SRV, not of \
             MEMCACHE_HOST_PORT"
                .into(),
        ),
        (None, None) => Err("BACKEND_TYPE=memcache: set MEMCACHE_HOST_PORT".into()),
        (Some(list), None) => {
            let servers: Vec<String> = (list.split(','))
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            match servers.iter().find(|s| {
                !s.rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
            }) {
                Some(bad) => Err(format!(
                    "MEMCACHE_HOST_PORT={list:?}: {bad:?} is not host:port"
                )),
                None => Ok(Some(Memcached::Servers(servers))),
            }
        }
    }
}

/// Go's `strconv.ParseBool`, which the reference's settings use.
fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A Go duration (`50ms`, `1s`, `1m30s`, `1.5s`), as the reference's settings take them.
pub(crate) fn parse_duration(v: &str) -> Option<Duration> {
    let mut rest = v.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = rest.split_at(digits);
        let number: f64 = number.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * seconds;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn the_references_defaults() {
        let s = settings(&[]).unwrap();
        assert_eq!((s.grpc_port, s.port, s.debug_port), (8081, 8080, 6070));
        assert_eq!(
            s.config_dir,
            PathBuf::from("/srv/runtime_data/current/config")
        );
        assert!(s.redis.is_none() && s.headers.is_none() && s.ignored.is_empty());
        assert_eq!(s.store_timeout, Duration::from_millis(50));
        assert_eq!(s.on_store_error, None);
        assert_eq!(s.charging, Charging::EveryHit);
    }

    #[test]
    fn charging_is_the_references_switch_or_ours() {
        let s = |vars: &[(&str, &str)]| settings(vars).map(|s| s.charging);
        let stop = ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true");
        assert_eq!(s(&[stop]), Ok(Charging::StopWhenOverLimit));
        assert_eq!(s(&[("CHARGE_REFUSED", "false")]), Ok(Charging::AllowedOnly));
        assert_eq!(s(&[("CHARGE_REFUSED", "true")]), Ok(Charging::EveryHit));
        let both = s(&[stop, ("CHARGE_REFUSED", "false")]).unwrap_err();
        assert!(both.starts_with("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true and CHARGE_REFUSED"));
        assert!(s(&[("CHARGE_REFUSED", "no")])
            .unwrap_err()
            .starts_with("CHARGE_REFUSED="));
    }

    #[test]
    fn reads_the_references_names() {
        let s = settings(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("REDIS_URL", "redis:6379"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("PROMETHEUS_MAPPER_YAML", "/etc/mapper.yaml"),
            ("ON_STORE_ERROR", "local"),
            ("REDIS_TIMEOUT", "1m30s"),
        ])
        .unwrap();
        assert_eq!(s.config_dir, PathBuf::from("/data/ratelimit/config"));
        assert_eq!(s.redis.unwrap().url, "redis:6379");
        assert_eq!(s.headers.unwrap()[0], "RateLimit-Limit");
        assert_eq!(s.ignored[0].0, "PROMETHEUS_MAPPER_YAML");
        assert_eq!(s.on_store_error, Some(OnStoreError::FallbackToMemory));
        assert_eq!(s.store_timeout, Duration::from_secs(90));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = settings(&[("SHADOW_MODE", "maybe")]).unwrap_err();
        assert_eq!(e, "SHADOW_MODE=\"maybe\": expected true or false");
        assert!(settings(&[("GRPC_PORT", "http")])
            .unwrap_err()
            .starts_with("GRPC_PORT="));
        assert!(settings(&[("ON_STORE_ERROR", "panic")])
            .unwrap_err()
            .starts_with("ON_STORE_ERROR="));
        assert!(settings(&[("GRPC_SERVER_USE_TLS", "true")])
            .unwrap_err()
            .contains("GRPC_SERVER_TLS_CERT"));
        assert!(settings(&[("GRPC_SERVER_USE_TLS", "false")]).is_ok());
        assert!(settings(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).is_ok());
        assert!(settings(&[("CONFIG_TYPE", "GRPC_XDS_DELTA")])
            .unwrap_err()
            .starts_with("CONFIG_TYPE="));
        assert!(settings(&[("STORE_TIMEOUT", "0s")]).is_err());
        assert!(settings(&[("STATS_MAX_SERIES", "lots")])
            .unwrap_err()
            .starts_with("STATS_MAX_SERIES="));
        assert_eq!(settings(&[]).unwrap().stats_max_series, 1_000);
        assert!(settings(&[("NEAR_LIMIT_RATIO", "most")])
            .unwrap_err()
            .starts_with("NEAR_LIMIT_RATIO="));
        assert!(settings(&[("NEAR_LIMIT_RATIO", "-1")]).is_err());
        let prometheus = [("USE_STATSD", "false"), ("USE_PROMETHEUS", "true")];
        assert!(
            settings(&[prometheus[0], prometheus[1], ("PROMETHEUS_PATH", "metrics")])
                .unwrap_err()
                .starts_with("PROMETHEUS_PATH=")
        );
        let on = settings(&prometheus).unwrap().prometheus;
        assert_eq!(on, Some(("0.0.0.0:9090".into(), "/metrics".into())));
        assert_eq!(
            settings(&[("PROMETHEUS_ADDR", ":1")]).unwrap().prometheus,
            None
        );
        assert_eq!(settings(&[]).unwrap().near_limit_ratio, 0.8);
        assert_eq!(
            settings(&[("NEAR_LIMIT_RATIO", "0.5")])
                .unwrap()
                .near_limit_ratio,
            0.5
        );
        assert_eq!(
            settings(&[("STATS_MAX_SERIES", "20")])
                .unwrap()
                .stats_max_series,
            20
        );
    }

    /// The reference's `src/service_cmd/runner/runner.go` (`switch s.BackendType`) takes
    /// `redis` and the empty value as Redis, `memcache` as memcached, whose servers its
    /// `src/settings/settings.go` reads from `MEMCACHE_HOST_PORT` (a comma list) or
    /// `MEMCACHE_SRV`, and `src/memcached/cache_impl.go` (`newMemcacheFromSettings`) refuses
    /// both at once.
    #[test]
    fn the_backend_type_chooses_redis_or_memcached() {
        for ok in ["redis", ""] {
            assert_eq!(settings(&[("BACKEND_TYPE", ok)]).unwrap().memcached, None);
        }
        let memcache = |vars: &[(&str, &str)]| {
            let mut all = vec![("BACKEND_TYPE", "memcache")];
            all.extend_from_slice(vars);
            settings(&all).map(|s| s.memcached)
        };
        assert_eq!(
            memcache(&[("MEMCACHE_HOST_PORT", "a:11211, b:11212")]),
            Ok(Some(Memcached::Servers(vec![
                "a:11211".to_owned(),
                "b:11212".to_owned()
            ])))
        );
        assert_eq!(
            memcache(&[("MEMCACHE_SRV", "_memcache._tcp.cache")]),
            Ok(Some(Memcached::Srv {
                name: "_memcache._tcp.cache".to_owned(),
                refresh: Duration::ZERO
            }))
        );
        assert_eq!(
            memcache(&[
                ("MEMCACHE_SRV", "_memcache._tcp.cache"),
                ("MEMCACHE_SRV_REFRESH", "1m30s")
            ]),
            Ok(Some(Memcached::Srv {
                name: "_memcache._tcp.cache".to_owned(),
                refresh: Duration::from_secs(90)
            }))
        );
        for (vars, starts) in [
            (vec![], "BACKEND_TYPE=memcache: set MEMCACHE_HOST_PORT"),
            (
                vec![("MEMCACHE_HOST_PORT", "a:1"), ("MEMCACHE_SRV", "_m._tcp.x")],
                "MEMCACHE_HOST_PORT and MEMCACHE_SRV are both set",
            ),
            (
                vec![
                    ("MEMCACHE_SRV", "_m._tcp.x"),
                    ("MEMCACHE_SRV_REFRESH", "often"),
                ],
                "MEMCACHE_SRV_REFRESH=\"often\": expected a duration",
            ),
            (
                vec![
                    ("MEMCACHE_HOST_PORT", "a:1"),
                    ("MEMCACHE_SRV_REFRESH", "1m"),
                ],
                "MEMCACHE_SRV_REFRESH is set: it refreshes",
            ),
            (
                vec![("MEMCACHE_HOST_PORT", "a")],
                "MEMCACHE_HOST_PORT=\"a\": \"a\" is not",
            ),
        ] {
            let e = memcache(&vars).unwrap_err();
            assert!(e.starts_with(starts), "{e}");
        }
        let e = settings(&[("BACKEND_TYPE", "dynamo")]).unwrap_err();
        assert!(
            e.starts_with("BACKEND_TYPE=\"dynamo\": expected redis or memcache"),
            "{e}"
        );
        for name in ["MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH"] {
            let e = settings(&[(name, "memcached:11211")]).unwrap_err();
            assert!(e.starts_with(&format!("{name} is set")), "{e}");
        }
    }

    /// The reference's `src/settings/settings.go`: `REDIS_POOL_SIZE` defaults to 10.
    #[test]
    fn the_redis_pool_size() {
        let redis = |vars: &[(&str, &str)]| settings(vars).map(|s| s.redis.unwrap().pool_size);
        assert_eq!(redis(&[("REDIS_URL", "h:1")]), Ok(10));
        assert_eq!(
            redis(&[("REDIS_URL", "h:1"), ("REDIS_POOL_SIZE", "3")]),
            Ok(3)
        );
        let e = redis(&[("REDIS_URL", "h:1"), ("REDIS_POOL_SIZE", "0")]).unwrap_err();
        assert!(e.starts_with("REDIS_POOL_SIZE="), "{e}");
    }

    #[test]
    fn worker_threads_from_tokios_variable() {
        assert_eq!(settings(&[]).unwrap().worker_threads, None);
        let s = settings(&[("TOKIO_WORKER_THREADS", "1")]).unwrap();
        assert_eq!(s.worker_threads, Some(1));
        for bad in ["0", "-1", "two"] {
            assert!(settings(&[("TOKIO_WORKER_THREADS", bad)])
                .unwrap_err()
                .starts_with("TOKIO_WORKER_THREADS="));
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("50ms"), Some(Duration::from_millis(50)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h3m"), Some(Duration::from_secs(7380)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("5 parsecs"), None);
    }
}
