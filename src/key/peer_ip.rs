//! [`PeerIp`]: the address of the TCP peer, and the address helpers [`ClientIp`] shares.
//!
//! [`ClientIp`]: super::ClientIp

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};

use http::request::Parts;

use super::KeyExtractor;

/// The IPv6 prefix length both IP extractors group by unless told otherwise.
pub(crate) const DEFAULT_IPV6_PREFIX: u8 = 64;

/// Keys requests by the address of the TCP peer, the machine that opened the connection.
///
/// Why: it is the one address a client cannot forge (TCP needs a handshake), so it is the safe
/// default when the service is reached directly.
///
/// **Behind a proxy or load balancer every request has the proxy's address**, and all clients
/// share one bucket. Use [`ClientIp`](super::ClientIp) with the proxies' networks instead; never
/// key by `X-Forwarded-For` yourself, since clients can write anything there.
///
/// IPv4 addresses are used as they are (IPv4-mapped IPv6 addresses such as `::ffff:192.0.2.1`
/// count as IPv4). An IPv6 client usually owns a whole `/64` and can pick a new address for
/// each request, so IPv6 addresses are grouped by a prefix, `/64` by default: the key is the
/// network, e.g. `2001:db8:1:2::/64`.
///
/// The address is read from the request extensions, the first of these found:
///
/// | extension | read |
/// |---|---|
/// | axum's `ConnectInfo<SocketAddr>` | with the `axum` feature (on by default) |
/// | a bare `SocketAddr` (e.g. inserted by your own hyper server or middleware) | always |
/// | tonic's `TcpConnectInfo` | with the `tonic` feature |
///
/// axum records `ConnectInfo` only when the router is served with
/// `into_make_service_with_connect_info::<SocketAddr>()`; without it (or without the `axum`
/// feature) there is no key, and one error is logged per process.
///
/// ```
/// use std::net::SocketAddr;
/// use axum::extract::ConnectInfo;
/// use tollgate::key::{KeyExtractor, PeerIp};
///
/// let peer: SocketAddr = "[2001:db8:1:2:3:4:5:6]:4711".parse()?;
/// let (req, ()) = http::Request::builder()
///     .extension(ConnectInfo(peer))
///     .body(())?
///     .into_parts();
/// assert_eq!(PeerIp::default().extract(&req).as_deref(), Some("2001:db8:1:2::/64"));
/// assert_eq!(
///     PeerIp::default().ipv6_prefix(48).extract(&req).as_deref(),
///     Some("2001:db8:1::/48")
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

impl Default for PeerIp {
    fn default() -> Self {
        Self {
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }
}

impl PeerIp {
    /// Groups IPv6 addresses by their first `prefix` bits (`0..=128`, larger values mean 128).
    ///
    /// `128` keys each IPv6 address on its own (a client can then dodge the limit by changing
    /// address within its network); `48` or `56` group a whole site.
    #[must_use]
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.ipv6_prefix = prefix.min(128);
        self
    }
}

impl KeyExtractor for PeerIp {
    fn extract(&self, req: &Parts) -> Option<String> {
        peer_ip(req).map(|ip| ip_key(ip, self.ipv6_prefix))
    }

    fn describe(&self) -> String {
        "the client's IP address".to_owned()
    }
}

/// The peer's address from the request extensions, IPv4-mapped addresses turned into IPv4.
///
/// Logs one error per process the first time no address is found.
pub(crate) fn peer_ip(req: &Parts) -> Option<IpAddr> {
    let addr = peer_socket_addr(req);
    if addr.is_none() {
        report_missing_peer();
    }
    addr.map(|addr| addr.ip().to_canonical())
}

fn peer_socket_addr(req: &Parts) -> Option<SocketAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = req
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    if let Some(addr) = req.extensions.get::<SocketAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "tonic")]
    if let Some(info) = req
        .extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
    {
        return info.remote_addr();
    }
    None
}

static MISSING_PEER_REPORTED: AtomicBool = AtomicBool::new(false);

fn report_missing_peer() {
    if !MISSING_PEER_REPORTED.swap(true, Ordering::Relaxed) {
        tracing::error!(
            "tollgate: the request carries no peer address, so PeerIp/ClientIp find no key \
             (the layer then follows its missing-key setting). With axum, keep tollgate's `axum` \
             feature on and serve the router with \
             `router.into_make_service_with_connect_info::<SocketAddr>()`; with tonic, enable \
             tollgate's `tonic` feature; otherwise insert the peer's `SocketAddr` as a request \
             extension. This error is logged once per process."
        );
    }
}

/// The key for `ip`: IPv4 as it is, IPv6 as its `/prefix` network (the address itself at 128).
pub(crate) fn ip_key(ip: IpAddr, ipv6_prefix: u8) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) if ipv6_prefix >= 128 => v6.to_string(),
        IpAddr::V6(v6) => {
            let mask = u128::MAX
                .checked_shl(u32::from(128 - ipv6_prefix))
                .unwrap_or(0);
            let network = Ipv6Addr::from(u128::from(v6) & mask);
            format!("{network}/{ipv6_prefix}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::ConnectInfo;

    fn request_with<T: Clone + Send + Sync + 'static>(ext: T) -> Parts {
        http::Request::builder()
            .extension(ext)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[cfg(feature = "axum")]
    #[test]
    fn reads_axum_connect_info() {
        let req = request_with(ConnectInfo(addr("203.0.113.7:5000")));
        assert_eq!(
            PeerIp::default().extract(&req).as_deref(),
            Some("203.0.113.7")
        );
    }

    #[test]
    fn reads_bare_socket_addr() {
        let req = request_with(addr("198.51.100.1:80"));
        assert_eq!(
            PeerIp::default().extract(&req).as_deref(),
            Some("198.51.100.1")
        );
    }

    #[cfg(feature = "tonic")]
    #[test]
    fn reads_tonic_connect_info() {
        let info = tonic::transport::server::TcpConnectInfo {
            local_addr: None,
            remote_addr: Some(addr("192.0.2.9:50051")),
        };
        let req = request_with(info);
        assert_eq!(
            PeerIp::default().extract(&req).as_deref(),
            Some("192.0.2.9")
        );
    }

    #[test]
    fn missing_address_is_none_and_reported_once() {
        let (req, ()) = http::Request::builder().body(()).unwrap().into_parts();
        assert_eq!(PeerIp::default().extract(&req), None);
        assert!(MISSING_PEER_REPORTED.load(Ordering::Relaxed));
        assert_eq!(PeerIp::default().extract(&req), None);
    }

    #[test]
    fn ipv6_grouped_by_64_by_default() {
        let a = request_with(ConnectInfo(addr("[2001:db8:aa:bb:1:2:3:4]:1")));
        let b = request_with(ConnectInfo(addr("[2001:db8:aa:bb:ffff::9]:2")));
        let c = request_with(ConnectInfo(addr("[2001:db8:aa:bc::1]:2")));
        let key = PeerIp::default();
        assert_eq!(key.extract(&a).as_deref(), Some("2001:db8:aa:bb::/64"));
        assert_eq!(key.extract(&a), key.extract(&b));
        assert_ne!(key.extract(&a), key.extract(&c));
    }

    #[test]
    fn ipv6_prefix_configurable() {
        let req = request_with(ConnectInfo(addr("[2001:db8:aa:bb:1:2:3:4]:1")));
        let key = |n| PeerIp::default().ipv6_prefix(n).extract(&req);
        assert_eq!(key(128).as_deref(), Some("2001:db8:aa:bb:1:2:3:4"));
        assert_eq!(key(200).as_deref(), Some("2001:db8:aa:bb:1:2:3:4"));
        assert_eq!(key(48).as_deref(), Some("2001:db8:aa::/48"));
        assert_eq!(key(1).as_deref(), Some("::/1"));
        assert_eq!(key(0).as_deref(), Some("::/0"));
    }

    #[test]
    fn ipv4_mapped_counts_as_ipv4() {
        let req = request_with(ConnectInfo(addr("[::ffff:192.0.2.1]:443")));
        assert_eq!(
            PeerIp::default().extract(&req).as_deref(),
            Some("192.0.2.1")
        );
    }
}
