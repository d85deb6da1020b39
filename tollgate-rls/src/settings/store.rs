//! Which store decides and how it is asked: `BACKEND_TYPE` (as the reference's `runner.go`
//! reads it: Redis for `redis` or empty, memcached for `memcache`) with Redis's (`redis.rs`)
//! or memcached's (`memcached.rs`) variables, `CACHE_KEY_PREFIX`, `STORE_TIMEOUT` (or the
//! reference's `REDIS_TIMEOUT`) and `ON_STORE_ERROR`.

use std::time::Duration;

use tollgate::store::OnStoreError;

use super::error::SettingsError;
use super::memcached::{self, Memcached};
use super::redis::{self, Redis, StartupRetry};
use super::vars::{parse_duration, Vars};

/// The store and how it is asked.
#[derive(Debug, Clone)]
pub(crate) struct StoreSettings {
    pub(crate) backend: Backend,
    /// `CACHE_KEY_PREFIX`: before every key, in Redis or memcached.
    pub(crate) key_prefix: String,
    pub(crate) timeout: Duration,
    /// `None`: a failing store is answered with a gRPC error, as the reference answers.
    pub(crate) on_error: Option<OnStoreError>,
    /// `REDIS_STARTUP_*`: how Redis is tried at start until it answers.
    pub(crate) startup: StartupRetry,
}

impl StoreSettings {
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` with Redis as the store: health follows it.
    pub(crate) fn health_follows_redis(&self) -> bool {
        matches!(&self.backend, Backend::Redis(r) if r.health_follows)
    }
}

/// The store `BACKEND_TYPE` and the addresses name.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// `BACKEND_TYPE=memory` (tollgate's): each instance counts alone.
    Memory,
    /// `BACKEND_TYPE=redis` or unset: Redis at `REDIS_URL`, or at the reference's default.
    Redis(Redis),
    /// `BACKEND_TYPE=memcache`: Redis is not used, as in the reference, even with `REDIS_URL`.
    Memcached(Memcached),
}

/// The store `vars` name. Everything else in `BACKEND_TYPE` stops the start.
pub(crate) fn read(vars: &Vars<'_>) -> Result<StoreSettings, SettingsError> {
    let backend_type = vars.var("BACKEND_TYPE");
    let backend_type = backend_type.as_deref().map(str::trim);
    let memcached = memcached::read(vars, backend_type == Some("memcache"))?;
    let backend = match (backend_type, memcached) {
        (_, Some(memcached)) => {
            // Checked all the same, so that a bad Redis setting is never silently kept.
            if vars.set("REDIS_URL").is_some() {
                redis::read(vars)?;
            }
            Backend::Memcached(memcached)
        }
        (None | Some("" | "redis"), None) => Backend::Redis(redis::read(vars)?),
        (Some("memory"), None) if vars.set("REDIS_URL").is_some() => {
            return Err(SettingsError::conflict_at(
                "BACKEND_TYPE",
                "memory",
                "and REDIS_URL are both set: set one (memory counts in each instance alone)",
            ));
        }
        (Some("memory"), None) => Backend::Memory,
        (Some(other), None) => {
            let expected = "expected redis, memcache or memory (tollgate's: each instance \
                            counts alone)";
            return Err(SettingsError::invalid("BACKEND_TYPE", other, expected));
        }
    };
    let timeout = match vars
        .var("STORE_TIMEOUT")
        .or_else(|| vars.var("REDIS_TIMEOUT"))
    {
        None => Duration::from_millis(50),
        Some(v) => parse_duration(&v).filter(|d| !d.is_zero()).ok_or_else(|| {
            let expected = "expected a duration above zero such as 50ms or 1s";
            SettingsError::invalid("STORE_TIMEOUT", v, expected)
        })?,
    };
    let on_error = match vars
        .get("ON_STORE_ERROR", "error")
        .to_ascii_lowercase()
        .as_str()
    {
        "error" => None,
        "open" | "allow" => Some(OnStoreError::Allow),
        "closed" | "deny" => Some(OnStoreError::Deny),
        "local" | "fallback" => Some(OnStoreError::FallbackToMemory),
        other => {
            let expected = "expected error (answer UNKNOWN, as the reference), open (answer \
                            OK), closed (answer OVER_LIMIT) or local (decide in this process)";
            return Err(SettingsError::invalid("ON_STORE_ERROR", other, expected));
        }
    };
    Ok(StoreSettings {
        backend,
        key_prefix: vars.get("CACHE_KEY_PREFIX", ""),
        timeout,
        on_error,
        startup: redis::startup(vars)?,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<StoreSettings, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    fn memcached(vars: &[(&str, &str)]) -> Result<Option<Memcached>, String> {
        read_from(vars).map(|s| match s.backend {
            Backend::Memcached(m) => Some(m),
            Backend::Memory | Backend::Redis(_) => None,
        })
    }

    /// The reference's `settings.go`: `BACKEND_TYPE` defaults to `redis` and `REDIS_URL` to
    /// its nutcracker socket; the memory store is tollgate's, asked for by name.
    #[test]
    fn the_references_defaults() {
        let s = read_from(&[]).unwrap();
        assert!(matches!(&s.backend, Backend::Redis(r) if r.url == redis::DEFAULT_URL));
        let memory = read_from(&[("BACKEND_TYPE", "memory")]).unwrap();
        assert!(matches!(memory.backend, Backend::Memory));
        let both = read_from(&[("BACKEND_TYPE", "memory"), ("REDIS_URL", "h:1")]);
        assert!(both
            .unwrap_err()
            .starts_with("BACKEND_TYPE=memory and REDIS_URL"));
        assert_eq!(s.timeout, Duration::from_millis(50));
        assert_eq!(s.on_error, None);
        let s = read_from(&[("ON_STORE_ERROR", "local"), ("REDIS_TIMEOUT", "1m30s")]).unwrap();
        assert_eq!(s.on_error, Some(OnStoreError::FallbackToMemory));
        assert_eq!(s.timeout, Duration::from_secs(90));
        assert!(read_from(&[("STORE_TIMEOUT", "0s")]).is_err());
        assert!(read_from(&[("ON_STORE_ERROR", "panic")])
            .unwrap_err()
            .starts_with("ON_STORE_ERROR="));
    }

    /// The reference's `src/service_cmd/runner/runner.go` (`switch s.BackendType`) takes
    /// `redis` and the empty value as Redis, `memcache` as memcached, whose servers its
    /// `src/settings/settings.go` reads from `MEMCACHE_HOST_PORT` (a comma list) or
    /// `MEMCACHE_SRV`, and `src/memcached/cache_impl.go` (`newMemcacheFromSettings`) refuses
    /// both at once.
    #[test]
    fn the_backend_type_chooses_redis_or_memcached() {
        for ok in ["redis", ""] {
            assert_eq!(memcached(&[("BACKEND_TYPE", ok)]), Ok(None));
        }
        let redis = read_from(&[("BACKEND_TYPE", "redis"), ("REDIS_URL", "h:1")]).unwrap();
        assert!(matches!(redis.backend, Backend::Redis(_)));
        let memcache = |vars: &[(&str, &str)]| {
            let mut all = vec![("BACKEND_TYPE", "memcache"), ("REDIS_URL", "h:1")];
            all.extend_from_slice(vars);
            memcached(&all)
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
            (
                vec![],
                "BACKEND_TYPE=memcache needs MEMCACHE_HOST_PORT or MEMCACHE_SRV",
            ),
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
        let e = read_from(&[("BACKEND_TYPE", "dynamo")]).unwrap_err();
        assert!(
            e.starts_with("BACKEND_TYPE=\"dynamo\": expected redis, memcache or memory"),
            "{e}"
        );
        for name in ["MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH"] {
            let e = read_from(&[(name, "memcached:11211")]).unwrap_err();
            assert!(e.starts_with(&format!("{name} is set")), "{e}");
        }
    }
}
