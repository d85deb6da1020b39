//! The reference's environment (envoyproxy/ratelimit's `settings.go`): the same names and
//! defaults, so an existing deployment only swaps the image. Settings that make no sense here
//! are accepted and logged once as ignored; a bad value is a [`SettingsError`] that names the
//! variable.
//!
//! One file per group of variables, each read by one function: `process.rs` (logs, threads),
//! `server.rs` and `tls.rs` (listeners), `config.rs` and `xds.rs` (where the limits come from),
//! `store.rs` with `redis.rs` and `memcached.rs` (the store), `answers.rs` (what an answer
//! says and a hit charges), `stats.rs` and `statsd.rs` (statistics), `traces.rs`, `ignored.rs`. `vars.rs`
//! reads the values' forms (Go's booleans and durations).

mod answers;
mod config;
mod error;
mod ignored;
mod memcached;
mod process;
mod redis;
mod server;
mod stats;
mod statsd;
mod store;
mod tls;
mod traces;
mod vars;
mod xds;

pub(crate) use answers::Answers;
pub(crate) use config::{Config, ConfigSource};
pub(crate) use error::SettingsError;
pub(crate) use memcached::Memcached;
pub(crate) use process::Process;
pub(crate) use redis::{Redis, StartupRetry, DEFAULT_URL as DEFAULT_REDIS_URL};
pub(crate) use server::Server;
pub(crate) use stats::{Prometheus, Stats};
pub(crate) use store::{Backend, StoreSettings};
pub(crate) use tls::GrpcTls;
pub(crate) use traces::Traces;

use vars::Vars;

/// Everything the server reads from its environment, by group.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) process: Process,
    pub(crate) server: Server,
    pub(crate) config: Config,
    pub(crate) store: StoreSettings,
    pub(crate) answers: Answers,
    pub(crate) stats: Stats,
    /// `TRACING_ENABLED`: how spans are exported.
    pub(crate) traces: Option<Traces>,
    /// Set variables that are accepted and not used, with why.
    pub(crate) ignored: Vec<(String, &'static str)>,
}

impl Settings {
    /// Reads the process's environment.
    pub(crate) fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `var` (the environment, or a map in tests).
    pub(crate) fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, SettingsError> {
        let vars = Vars::new(&var);
        ignored::refuse_unsupported(&vars)?;
        ignored::refuse_unreadable(&vars)?;
        Ok(Self {
            store: store::read(&vars)?,
            config: config::read(&vars)?,
            answers: answers::read(&vars)?,
            stats: stats::read(&vars)?,
            process: process::read(&vars)?,
            server: server::read(&vars)?,
            traces: traces::read(&vars)?,
            ignored: ignored::read(&vars),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;
    use std::time::Duration;

    use tollgate::engine::Charging;
    use tollgate::store::OnStoreError;

    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_references_defaults() {
        let s = settings(&[]).unwrap();
        let server = &s.server;
        assert_eq!(
            (server.grpc_port, server.port, server.debug_port),
            (8081, 8080, 6070)
        );
        // No RUNTIME_SUBDIRECTORY: the reference's nil loader, no file read.
        assert!(matches!(s.config.source, ConfigSource::Nothing));
        assert!(matches!(s.store.backend, Backend::Redis(_)));
        assert!(s.answers.headers.is_none() && s.ignored.is_empty());
        assert_eq!(s.store.timeout, Duration::from_millis(50));
        assert_eq!(s.store.on_error, None);
        assert_eq!(s.answers.charging, Charging::EveryHit);
        assert_eq!(s.process.log_level, "warn");
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
        assert!(matches!(
            s.config.source,
            ConfigSource::Dir(dir) if dir == Path::new("/data/ratelimit/config")
        ));
        assert!(matches!(&s.store.backend, Backend::Redis(r) if r.url == "redis:6379"));
        assert_eq!(s.answers.headers.unwrap()[0], "RateLimit-Limit");
        assert_eq!(s.ignored[0].0, "PROMETHEUS_MAPPER_YAML");
        assert_eq!(s.store.on_error, Some(OnStoreError::FallbackToMemory));
        assert_eq!(s.store.timeout, Duration::from_secs(90));
    }

    /// The reference's variables (`src/settings/settings.go` at f2fb157, kept as
    /// `NAME=DEFAULT` lines by `scripts/reference_vars.sh`), but those another branch takes up.
    fn reference_vars() -> Vec<(&'static str, &'static str)> {
        let pending = include_str!("../../tests/rls/reference/settings_vars_pending.txt");
        let pending: Vec<&str> = pending.lines().filter(|l| !l.starts_with('#')).collect();
        include_str!("../../tests/rls/reference/settings_vars.txt")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .filter(|(name, _)| !pending.contains(name))
            .collect()
    }

    /// Every variable of the reference's `settings.go` is read (looked up by the settings,
    /// with every group switched on in turn) or logged once as ignored; and the reference's
    /// own defaults, all set at once, are taken.
    #[test]
    fn every_reference_variable_is_read_or_logged() {
        let reference = reference_vars();
        assert_eq!(reference.len(), 114 - 7);
        let asked = std::cell::RefCell::new(std::collections::HashSet::<String>::new());
        let mut logged = std::collections::HashSet::new();
        let switched_on: [&[(&str, &str)]; 6] = [
            &[],
            &[
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ],
            &[
                ("GRPC_SERVER_USE_TLS", "true"),
                ("GRPC_SERVER_TLS_CERT", "/c.pem"),
                ("GRPC_SERVER_TLS_KEY", "/k.pem"),
                ("REDIS_TLS", "true"),
                ("TRACING_ENABLED", "true"),
            ],
            &[("USE_STATSD", "false"), ("USE_PROMETHEUS", "true")],
            &[
                ("USE_STATSD", "false"),
                ("USE_DOG_STATSD", "true"),
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ],
            &[
                ("BACKEND_TYPE", "memcache"),
                ("MEMCACHE_HOST_PORT", "127.0.0.1:11211"),
            ],
        ];
        for over in switched_on {
            let value = |name: &str| {
                let set = over.iter().chain(&reference).find(|(n, _)| *n == name);
                set.map(|(_, v)| (*v).to_owned())
            };
            let lookup = |name: &str| {
                asked.borrow_mut().insert(name.to_owned());
                value(name)
            };
            let s = Settings::from_lookup(lookup).unwrap_or_else(|e| panic!("{over:?}: {e}"));
            logged.extend(s.ignored.into_iter().map(|(name, _)| name));
        }
        let asked = asked.into_inner();
        let dropped: Vec<&str> = (reference.iter().map(|(name, _)| *name))
            .filter(|name| !asked.contains(*name) && !logged.contains(*name))
            .collect();
        assert!(dropped.is_empty(), "neither read nor logged: {dropped:?}");
    }

    /// Every group's errors reach the caller, naming the variable.
    #[test]
    fn bad_values_name_the_variable() {
        let e = settings(&[("SHADOW_MODE", "maybe")]).unwrap_err();
        assert_eq!(e, "SHADOW_MODE=\"maybe\": expected true or false");
        for (name, value) in [
            ("GRPC_PORT", "http"),
            ("ON_STORE_ERROR", "panic"),
            ("CONFIG_TYPE", "GRPC_XDS_DELTA"),
            ("STATS_MAX_SERIES", "lots"),
            ("NEAR_LIMIT_RATIO", "most"),
            ("LOG_LEVEL", "chatty"),
            ("TOKIO_WORKER_THREADS", "0"),
            ("BACKEND_TYPE", "dynamo"),
            ("XDS_CLIENT_BACKOFF_JITTER", "sometimes"),
        ] {
            let mut vars = vec![(name, value)];
            if name.starts_with("XDS_") {
                vars.push(("CONFIG_TYPE", "GRPC_XDS_SOTW"));
            }
            let e = settings(&vars).unwrap_err();
            assert!(e.starts_with(&format!("{name}=")), "{e}");
        }
        assert!(settings(&[("STORE_TIMEOUT", "0s")]).is_err());
        assert!(settings(&[("GRPC_SERVER_USE_TLS", "true")])
            .unwrap_err()
            .contains("GRPC_SERVER_TLS_CERT"));
        assert!(settings(&[("GRPC_SERVER_USE_TLS", "false")]).is_ok());
        assert!(settings(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).is_ok());
        let prometheus = [
            ("USE_STATSD", "false"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_PATH", "metrics"),
        ];
        assert!(settings(&prometheus)
            .unwrap_err()
            .starts_with("PROMETHEUS_PATH="));
    }
}
