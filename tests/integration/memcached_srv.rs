//! memcached servers found through a DNS SRV record (`MemcachedStore::from_srv`), asked of a
//! real name server on loopback: the store shares its limit across the servers the record
//! names, moves to new ones when the record changes, keeps its servers when a lookup fails,
//! and refuses a name that is not an SRV record's or names no server. The reference does the
//! same in `src/memcached/cache_impl.go` (`newMemcachedFromSrv`, `refreshServersPeriodically`)
//! and `src/srv/srv.go` (the name's form, the servers sorted).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tollgate::store::{MemcachedSrv, MemcachedStore, Policy, Store};
use tollgate::{Algorithm, Quota};

use crate::support::dns::SrvServer;
use crate::support::memcached::MemcachedServer;
use crate::support::unique_prefix;

fn address(server: &MemcachedServer) -> SocketAddr {
    server.address().parse().unwrap()
}

fn policy(limit: u32) -> Policy {
    Policy::new("p", Quota::per_minute(limit).unwrap(), Algorithm::Gcra).unwrap()
}

/// How many of `asks` checks of `key` the store admits.
async fn admitted(store: &MemcachedStore, key: &str, policy: &Policy, asks: u32) -> u32 {
    let mut admitted = 0;
    for _ in 0..asks {
        admitted += u32::from(store.check(key, policy, 1).await.unwrap().allowed);
    }
    admitted
}

/// Waits until the name server has answered `n` more queries than `from` (within 5 s).
async fn until_queried(dns: &SrvServer, from: usize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while dns.queries() < from + n {
        assert!(Instant::now() < deadline, "{} queries", dns.queries());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_instances_on_the_servers_of_a_record_admit_exactly_the_limit() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let dns = SrvServer::start(&[address(&a), address(&b)]);
    let srv = MemcachedSrv::new("_memcache._tcp.cache.test").nameserver(dns.address());
    let prefix = unique_prefix("srv-exact");
    let one = MemcachedStore::from_srv(srv.clone()).await.unwrap();
    let two = MemcachedStore::from_srv(srv).await.unwrap();
    let (one, two) = (one.prefix(prefix.clone()), two.prefix(prefix));
    let policy = policy(5);
    for k in 0..20 {
        let key = format!("client-{k}");
        let first = admitted(&one, &key, &policy, 4).await;
        let second = admitted(&two, &key, &policy, 4).await;
        assert_eq!((first, second), (4, 1), "{key}");
    }
    let listed = format!("{one:?}");
    assert!(
        listed.contains(&a.address()) && listed.contains(&b.address()),
        "{listed}"
    );
}

#[tokio::test]
async fn a_changed_record_moves_the_store_and_a_failed_lookup_keeps_it() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let dns = SrvServer::start(&[address(&a)]);
    let every = Duration::from_millis(100);
    let srv = MemcachedSrv::new("_memcache._tcp.cache.test")
        .nameserver(dns.address())
        .refresh_every(every);
    let store = MemcachedStore::from_srv(srv)
        .await
        .unwrap()
        .prefix(unique_prefix("srv-move"));
    let policy = policy(3);
    assert_eq!(admitted(&store, "k", &policy, 5).await, 3);

    // On b, which has never seen "k": a whole quota again.
    dns.set(&[address(&b)]);
    until_queried(&dns, dns.queries(), 2).await;
    assert_eq!(admitted(&store, "k", &policy, 5).await, 3);

    // The record names nothing: the store stays on b, where "k" has no quota left.
    dns.set(&[]);
    until_queried(&dns, dns.queries(), 2).await;
    assert_eq!(admitted(&store, "k", &policy, 5).await, 0);
    assert!(format!("{store:?}").contains(&b.address()));
}

#[tokio::test]
async fn the_lookups_end_with_the_store() {
    let server = MemcachedServer::start();
    let dns = SrvServer::start(&[address(&server)]);
    let srv = MemcachedSrv::new("_memcache._tcp.cache.test")
        .nameserver(dns.address())
        .refresh_every(Duration::from_millis(50));
    let store = MemcachedStore::from_srv(srv).await.unwrap();
    until_queried(&dns, dns.queries(), 2).await;
    let clone = store.clone();
    drop(store);
    until_queried(&dns, dns.queries(), 2).await;
    drop(clone);
    // One lookup may be under way when the last clone goes; none after it.
    tokio::time::sleep(Duration::from_millis(120)).await;
    let after = dns.queries();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(dns.queries(), after);
}

#[tokio::test]
async fn a_name_of_no_srv_record_or_of_no_server_is_a_config_error() {
    let dns = SrvServer::start(&[]);
    let error = MemcachedStore::from_srv(MemcachedSrv::new("cache.test").nameserver(dns.address()))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("_service._proto.domain"),
        "{error}"
    );
    assert_eq!(dns.queries(), 0);

    let srv = MemcachedSrv::new("_memcache._tcp.cache.test").nameserver(dns.address());
    let error = MemcachedStore::from_srv(srv).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("SRV record _memcache._tcp.cache.test"),
        "{error}"
    );
}
