//! The memcached store of `BACKEND_TYPE=memcache`.

use tollgate::store::{MemcachedSrv, MemcachedStore};

use crate::settings::{Memcached, SettingsError};

/// The memcached store `memcached` names, with the key prefix `prefix` (none when empty), and
/// a description of it for the log. Servers from an SRV record are looked up here: a lookup
/// that fails stops the start, as in the reference's `newMemcachedFromSrv`.
pub(crate) async fn build(
    memcached: &Memcached,
    prefix: &str,
) -> Result<(MemcachedStore, String), SettingsError> {
    let store = match memcached {
        Memcached::Servers(servers) => MemcachedStore::new(servers.iter().cloned())
            .map_err(|e| SettingsError::unusable("MEMCACHE_HOST_PORT", e.to_string()))?,
        Memcached::Srv { name, refresh } => {
            let srv = MemcachedSrv::new(name.as_str()).refresh_every(*refresh);
            (MemcachedStore::from_srv(srv).await)
                .map_err(|e| SettingsError::unusable("MEMCACHE_SRV", e.to_string()))?
        }
    };
    let servers = store.servers().join(",");
    let store = match prefix {
        "" => store,
        prefix => store.prefix(prefix),
    };
    let described = match memcached {
        Memcached::Servers(_) => format!("memcached ({servers})"),
        Memcached::Srv { name, .. } => format!("memcached ({name}: {servers})"),
    };
    Ok((store, described))
}
