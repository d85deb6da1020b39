//! The reference's per-second Redis: `REDIS_PERSECOND=true` puts the counters of per-second
//! limits on a Redis of their own, named by `REDIS_PERSECOND_URL`, `_TYPE`, `_SOCKET_TYPE`,
//! `_AUTH`, `_SENTINEL_AUTH`, `_TLS` and `_POOL_SIZE` (its `src/settings/settings.go` lines
//! 159-183, with its defaults; the TLS files are `REDIS_TLS_*`, shared with the main Redis,
//! as its `RedisTlsConfig(s.RedisTls || s.RedisPerSecondTls)` shares them).

use super::error::SettingsError;
use super::redis::{refuse_what_the_reference_refuses, Redis};
use super::vars::Vars;

/// The per-second Redis `vars` name, if `REDIS_PERSECOND` is true and the store is Redis
/// (`main`, its settings). With memcached (`memcached`) it is not read, as in the reference
/// (whose memcached cache has no per-second client); without a store it stops the start
/// rather than count per instance.
pub(crate) fn read(
    vars: &Vars<'_>,
    main: Option<&Redis>,
    memcached: bool,
) -> Result<Option<Redis>, SettingsError> {
    if !vars.flag("REDIS_PERSECOND", false)? || memcached {
        return Ok(None);
    }
    let Some(main) = main else {
        return Err(SettingsError::conflict_at(
            "REDIS_PERSECOND",
            "true",
            "needs the Redis store: set REDIS_URL (and REDIS_PERSECOND_URL)",
        ));
    };
    let kind = vars
        .get("REDIS_PERSECOND_TYPE", "single")
        .to_ascii_lowercase();
    refuse_what_the_reference_refuses(vars, "REDIS_PERSECOND", &kind)?;
    Ok(Some(Redis {
        names: "REDIS_PERSECOND",
        url: vars.get(
            "REDIS_PERSECOND_URL",
            "/var/run/nutcracker/ratelimitpersecond.sock",
        ),
        kind,
        socket_type: (vars.get("REDIS_PERSECOND_SOCKET_TYPE", "unix")).to_ascii_lowercase(),
        auth: vars.get("REDIS_PERSECOND_AUTH", ""),
        sentinel_auth: vars.get("REDIS_PERSECOND_SENTINEL_AUTH", ""),
        tls: vars.flag("REDIS_PERSECOND_TLS", false)?,
        pool_size: vars.parsed(
            "REDIS_PERSECOND_POOL_SIZE",
            10,
            |v| v.trim().parse().ok().filter(|n| *n > 0),
            "expected a number of connections above zero",
        )?,
        ..main.clone()
    }))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::redis;
    use super::*;

    fn per_second(vars: &[(&str, &str)]) -> Result<Option<Redis>, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        let vars = Vars::new(&lookup);
        let backend = vars.var("BACKEND_TYPE");
        let main = match backend.as_deref() {
            Some("memcache" | "memory") => None,
            _ => Some(redis::read(&vars).map_err(|e| e.to_string())?),
        };
        let memcached = backend.as_deref() == Some("memcache");
        read(&vars, main.as_ref(), memcached).map_err(|e| e.to_string())
    }

    /// The reference's names and defaults (`src/settings/settings.go` lines 159-165: off, a
    /// `unix` socket at `/var/run/nutcracker/ratelimitpersecond.sock`, `SINGLE`, 10).
    #[test]
    fn the_references_names_and_defaults() {
        assert!(per_second(&[("REDIS_URL", "h:1")]).unwrap().is_none());
        let on = [("REDIS_URL", "h:1"), ("REDIS_PERSECOND", "true")];
        let r = per_second(&on).unwrap().unwrap();
        assert_eq!(r.url, "/var/run/nutcracker/ratelimitpersecond.sock");
        assert_eq!(
            (r.kind.as_str(), r.socket_type.as_str()),
            ("single", "unix")
        );
        assert_eq!((r.pool_size, r.names), (10, "REDIS_PERSECOND"));
        let r = per_second(&[
            ("REDIS_URL", "h:1"),
            ("REDIS_AUTH", "main"),
            ("REDIS_PERSECOND", "1"),
            ("REDIS_PERSECOND_URL", "fast:6380"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_AUTH", "user:pw"),
            ("REDIS_PERSECOND_POOL_SIZE", "3"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((r.url.as_str(), r.auth.as_str()), ("fast:6380", "user:pw"));
        assert_eq!((r.socket_type.as_str(), r.pool_size), ("tcp", 3));
        let memcache = [
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_HOST_PORT", "m:11211"),
            ("REDIS_PERSECOND", "true"),
        ];
        assert!(per_second(&memcache).unwrap().is_none());
        let memory = [("BACKEND_TYPE", "memory"), ("REDIS_PERSECOND", "true")];
        let e = per_second(&memory).unwrap_err();
        assert!(
            e.starts_with("REDIS_PERSECOND=true needs the Redis store"),
            "{e}"
        );
        let e = per_second(&[("REDIS_PERSECOND", "yes please")]).unwrap_err();
        assert!(e.starts_with("REDIS_PERSECOND="), "{e}");
        // As for the main Redis: driver_impl.go's newClientImpl builds both clients.
        let create = [
            ("REDIS_URL", "h:1"),
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "CREATE"),
        ];
        let e = per_second(&create).unwrap_err();
        assert!(
            e.starts_with("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR="),
            "{e}"
        );
    }
}
