//! Where the memcached servers of `BACKEND_TYPE=memcache` are: `MEMCACHE_HOST_PORT` (a comma
//! list, as the reference's `settings.go` reads it) or the DNS SRV record `MEMCACHE_SRV`,
//! looked up again every `MEMCACHE_SRV_REFRESH`.

use std::time::Duration;

use super::error::SettingsError;
use super::vars::{parse_duration, Vars};

/// The memcached servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Memcached {
    /// `MEMCACHE_HOST_PORT`: the servers, `host:port` each.
    Servers(Vec<String>),
    /// `MEMCACHE_SRV`: the DNS SRV record that names them, looked up again every
    /// `MEMCACHE_SRV_REFRESH` (zero, the default: never).
    Srv { name: String, refresh: Duration },
}

/// The variables that say where memcached is.
const NAMES: [&str; 3] = ["MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH"];

/// The memcached servers `vars` name when memcached is the store (`chosen`), `None` when it
/// is not. A memcached setting without `BACKEND_TYPE=memcache` stops the start rather than
/// leave each instance counting alone, and so do both forms at once (the reference's
/// `newMemcacheFromSettings`, src/memcached/cache_impl.go, refuses them), and
/// `MEMCACHE_SRV_REFRESH` without `MEMCACHE_SRV`.
pub(crate) fn read(vars: &Vars<'_>, chosen: bool) -> Result<Option<Memcached>, SettingsError> {
    if !chosen {
        return match NAMES.into_iter().find(|name| set(vars, name).is_some()) {
            Some(name) => Err(SettingsError::conflict(
                name,
                "is set: memcached is used with BACKEND_TYPE=memcache only",
            )),
            None => Ok(None),
        };
    }
    match (vars.set("MEMCACHE_HOST_PORT"), vars.set("MEMCACHE_SRV")) {
        (Some(_), Some(_)) => Err(SettingsError::conflict(
            "MEMCACHE_HOST_PORT",
            "and MEMCACHE_SRV are both set: set one",
        )),
        (None, Some(name)) => {
            let refresh = match vars.set("MEMCACHE_SRV_REFRESH") {
                None => Duration::ZERO,
                Some(v) => parse_duration(&v).ok_or_else(|| {
                    let expected = "expected a duration such as 30s or 5m";
                    SettingsError::invalid("MEMCACHE_SRV_REFRESH", v, expected)
                })?,
            };
            let name = name.trim().to_owned();
            Ok(Some(Memcached::Srv { name, refresh }))
        }
        (Some(_), None) if set(vars, "MEMCACHE_SRV_REFRESH").is_some() => {
            Err(SettingsError::conflict(
                "MEMCACHE_SRV_REFRESH",
                "is set: it refreshes the servers of MEMCACHE_SRV, not of MEMCACHE_HOST_PORT",
            ))
        }
        (None, None) => Err(SettingsError::conflict_at(
            "BACKEND_TYPE",
            "memcache",
            "needs MEMCACHE_HOST_PORT or MEMCACHE_SRV",
        )),
        (Some(list), None) => servers(&list).map(|s| Some(Memcached::Servers(s))),
    }
}

/// `name`'s value when it asks for something: set, not blank, and for `MEMCACHE_SRV_REFRESH`
/// not the reference's default, `0` (never refresh).
fn set(vars: &Vars<'_>, name: &str) -> Option<String> {
    let zero =
        |v: &String| name == "MEMCACHE_SRV_REFRESH" && parse_duration(v) == Some(Duration::ZERO);
    vars.set(name).filter(|v| !zero(v))
}

/// The `host:port` servers of the comma list `MEMCACHE_HOST_PORT`.
fn servers(list: &str) -> Result<Vec<String>, SettingsError> {
    let servers: Vec<String> = (list.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let host_port = |s: &String| {
        s.rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    };
    match servers.iter().find(|s| !host_port(s)) {
        Some(bad) => Err(SettingsError::invalid(
            "MEMCACHE_HOST_PORT",
            list,
            format!("{bad:?} is not host:port"),
        )),
        None => Ok(servers),
    }
}
