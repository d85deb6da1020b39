//! [`MemcachedSrv`]: the memcached servers a DNS SRV record names, looked up when the store
//! is made and, if asked, again every so often, as the reference rate limit service reads
//! its `MEMCACHE_SRV` and `MEMCACHE_SRV_REFRESH`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;

use super::servers::ServerList;
use super::{store_error, MemcachedStore};
use crate::error::ConfigError;

/// Where DNS says the memcached servers are: an SRV record such as
/// `_memcache._tcp.cache.internal`, each of its answers a server (its target's address and
/// port). Every instance sorts the servers alike, so they agree on which server keeps a key.
///
/// ```no_run
/// use std::time::Duration;
/// use tollgate::store::{MemcachedSrv, MemcachedStore};
///
/// # async fn run() -> Result<(), tollgate::ConfigError> {
/// let srv = MemcachedSrv::new("_memcache._tcp.cache.internal")
///     .refresh_every(Duration::from_secs(60));
/// let store = MemcachedStore::from_srv(srv).await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MemcachedSrv {
    name: String,
    refresh: Duration,
    nameserver: Option<SocketAddr>,
}

impl MemcachedSrv {
    /// The SRV record `name` (`_service._proto.domain`), looked up once, through the
    /// system's resolver configuration (`/etc/resolv.conf`).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            refresh: Duration::ZERO,
            nameserver: None,
        }
    }

    /// Looks the record up again every `every` (zero: never, the default) and moves to the
    /// servers it names. A lookup that fails keeps the servers of the last one that did not.
    #[must_use]
    pub fn refresh_every(mut self, every: Duration) -> Self {
        self.refresh = every;
        self
    }

    /// Asks the name server at `address` (UDP, then TCP), such as a Consul agent's DNS on
    /// port 8600, instead of the system's.
    #[must_use]
    pub fn nameserver(mut self, address: SocketAddr) -> Self {
        self.nameserver = Some(address);
        self
    }
}

impl MemcachedStore {
    /// A store on the servers `srv` names. The record is looked up now: a name that is not
    /// an SRV record's, or a lookup that fails or finds no server, is a
    /// [`ConfigError`]. With [`refresh_every`](MemcachedSrv::refresh_every), a task of the
    /// current runtime looks it up again for as long as the store (or a clone) lives.
    pub async fn from_srv(srv: MemcachedSrv) -> Result<Self, ConfigError> {
        let lookup = Lookup::new(&srv).map_err(store_error)?;
        let servers = lookup.servers().await.map_err(store_error)?;
        let store = Self::new(servers)?;
        if !srv.refresh.is_zero() {
            tokio::spawn(refresh(lookup, store.server_list(), srv.refresh));
        }
        Ok(store)
    }
}

/// Moves `list` to the servers `lookup` finds, every `every`, until its store is gone.
async fn refresh(lookup: Lookup, list: ServerList, every: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let servers = match lookup.servers().await {
            Ok(servers) => servers,
            Err(_) if !list.in_use() => return,
            Err(e) => {
                tracing::warn!("keeping the memcached servers: {e}");
                continue;
            }
        };
        match list.replace(servers) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => tracing::warn!("keeping the memcached servers: {e}"),
        }
    }
}

/// An SRV record and the resolver that looks it up.
struct Lookup {
    name: String,
    resolver: TokioResolver,
}

impl Lookup {
    fn new(srv: &MemcachedSrv) -> Result<Self, String> {
        if !is_srv_name(&srv.name) {
            return Err(format!(
                "{:?} is not an SRV record's name: use _service._proto.domain \
                 (_memcache._tcp.cache.internal)",
                srv.name
            ));
        }
        let provider = TokioRuntimeProvider::default();
        let builder = match srv.nameserver {
            Some(address) => {
                let mut server = NameServerConfig::udp_and_tcp(address.ip());
                for connection in &mut server.connections {
                    connection.port = address.port();
                }
                let config = ResolverConfig::from_parts(None, Vec::new(), vec![server]);
                TokioResolver::builder_with_config(config, provider)
            }
            None => TokioResolver::builder(provider)
                .map_err(|e| format!("cannot read the system's DNS configuration: {e}"))?,
        };
        let resolver = builder
            .build()
            .map_err(|e| format!("cannot set up a DNS resolver: {e}"))?;
        Ok(Self {
            name: srv.name.clone(),
            resolver,
        })
    }

    /// The servers the record names now, `address:port` each, sorted.
    async fn servers(&self) -> Result<Vec<String>, String> {
        let failed = |e: &dyn std::fmt::Display| format!("SRV record {}: {e}", self.name);
        let found = (self.resolver.srv_lookup(self.name.as_str()).await).map_err(|e| failed(&e))?;
        let mut servers = Vec::new();
        for record in found.answers() {
            let RData::SRV(srv) = &record.data else {
                continue;
            };
            let target = srv.target.to_string();
            let target = target.trim_end_matches('.');
            let ip = match target.parse::<IpAddr>() {
                Ok(ip) => ip,
                Err(_) => (self.resolver.lookup_ip(target).await)
                    .map_err(|e| failed(&format!("target {target}: {e}")))?
                    .iter()
                    .next()
                    .ok_or_else(|| failed(&format!("target {target} has no address")))?,
            };
            servers.push(SocketAddr::new(ip, srv.port).to_string());
        }
        if servers.is_empty() {
            return Err(failed(&"names no server"));
        }
        servers.sort();
        servers.dedup();
        Ok(servers)
    }
}

/// `_service._proto.domain`, as the reference's `src/srv/srv.go` parses it.
fn is_srv_name(name: &str) -> bool {
    let mut parts = name.splitn(3, '.');
    let labelled = |part: Option<&str>| part.is_some_and(|p| p.len() > 1 && p.starts_with('_'));
    labelled(parts.next()) && labelled(parts.next()) && parts.next().is_some_and(|d| !d.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srv_names_are_service_proto_domain() {
        for good in ["_memcache._tcp.cache.internal", "_m._udp.x"] {
            assert!(is_srv_name(good), "{good}");
        }
        for bad in [
            "",
            "cache.internal",
            "_memcache.cache.internal",
            "_._tcp.x",
            "_m._tcp.",
        ] {
            assert!(!is_srv_name(bad), "{bad}");
        }
    }
}
