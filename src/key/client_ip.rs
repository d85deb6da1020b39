//! [`ClientIp`]: the client's address, read through the proxies you trust.

use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use ipnet::{IpNet, Ipv4Net};

use super::forwarded::{parse_forwarded, parse_x_forwarded_for, Hop};
use super::peer_ip::{ip_key, peer_ip, DEFAULT_IPV6_PREFIX};
use super::KeyExtractor;

/// Keys requests by the client's IP address when the service sits behind proxies or load
/// balancers you run.
///
/// Why not `X-Forwarded-For` directly: **clients write whatever they like into forwarding
/// headers**. A limiter keyed by the leftmost `X-Forwarded-For` entry gives every request a new
/// bucket to an attacker who sends a random address each time. `ClientIp` believes a forwarding
/// header only as far as it was written by a proxy you trust:
///
/// 1. If the TCP peer is not in a trusted network, the peer *is* the client and every
///    forwarding header is ignored (it may be forged).
/// 2. Otherwise the chain of addresses is read from one header, `X-Forwarded-For` unless
///    [`ClientIp::header`] names `Forwarded` (RFC 7239, `for=`) or `X-Real-IP`, and walked
///    from the right (the hop nearest to us), skipping trusted addresses. The first untrusted
///    address is the client: it is what the outermost trusted proxy saw as its peer. Addresses
///    further left were written by the client and are never used.
/// 3. If every hop is trusted (a request from inside your network), the leftmost hop is used.
/// 4. If the entry that would be the client is not an address (`unknown`, an obfuscated
///    identifier, garbage), the nearest trusted hop is used instead, so a client can never
///    choose its key.
///
/// List exactly your proxies' networks: trusting a network clients can send from lets them
/// choose their key. Only one header is read because a proxy that writes one of them passes
/// the others through from the client untouched: reading "the first header present" would let
/// a client pick its key by sending the header your proxy does not write. `X-Forwarded-For`
/// is the default because nginx, HAProxy, Envoy and the cloud load balancers write it; name
/// another with [`ClientIp::header`] if your proxy writes that instead.
///
/// The key is formatted as by [`PeerIp`](super::PeerIp): IPv4 as is, IPv6 grouped by a `/64`
/// prefix unless [`ClientIp::ipv6_prefix`] says otherwise. Without a peer address in the
/// request extensions (see `PeerIp`) there is no key.
///
/// ```
/// use std::net::SocketAddr;
/// use axum::extract::ConnectInfo;
/// use tollgate::key::{ClientIp, KeyExtractor};
///
/// let key = ClientIp::trusting(["10.0.0.0/8".parse()?]);
///
/// // Through our proxy at 10.0.0.2; the client forged the leftmost entry.
/// let peer: SocketAddr = "10.0.0.2:5000".parse()?;
/// let (req, ()) = http::Request::builder()
///     .extension(ConnectInfo(peer))
///     .header("x-forwarded-for", "1.2.3.4, 203.0.113.9")
///     .body(())?
///     .into_parts();
/// assert_eq!(key.extract(&req).as_deref(), Some("203.0.113.9"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIp {
    trusted: Arc<[IpNet]>,
    ipv6_prefix: u8,
    header: ProxyHeader,
}

/// A forwarding header [`ClientIp`] can be told to read, and no other.
///
/// Why: a proxy that writes one of them usually passes the others from the client through
/// untouched, so reading a header your proxy does not write means reading the client's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// RFC 7239 `Forwarded`, its `for=` parameters.
    Forwarded,
    /// `X-Forwarded-For`, a comma-separated list of addresses (nginx, AWS ALB, Envoy, ...).
    XForwardedFor,
    /// `X-Real-IP`, one address (nginx's `proxy_set_header X-Real-IP $remote_addr`).
    XRealIp,
}

impl ProxyHeader {
    fn name(self) -> &'static str {
        match self {
            Self::Forwarded => "forwarded",
            Self::XForwardedFor => "x-forwarded-for",
            Self::XRealIp => "x-real-ip",
        }
    }

    fn hops(self, req: &Parts) -> Vec<Hop> {
        let values = req
            .headers
            .get_all(self.name())
            .iter()
            .map(|value| value.as_bytes());
        match self {
            Self::Forwarded => parse_forwarded(values),
            Self::XForwardedFor | Self::XRealIp => parse_x_forwarded_for(values),
        }
    }
}

impl Default for ClientIp {
    /// Trusts nobody: the key is the peer's address, as with [`PeerIp`](super::PeerIp).
    fn default() -> Self {
        Self::trusting([])
    }
}

impl ClientIp {
    /// Reads forwarding headers only from peers in these networks, your proxies.
    ///
    /// ```
    /// use tollgate::key::ClientIp;
    ///
    /// let key = ClientIp::trusting(["10.0.0.0/8".parse()?, "2001:db8:ffff::/48".parse()?]);
    /// # Ok::<(), ipnet::AddrParseError>(())
    /// ```
    pub fn trusting(cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            trusted: cidrs.into_iter().map(canonical_net).collect(),
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            header: ProxyHeader::XForwardedFor,
        }
    }

    /// Groups IPv6 addresses by their first `prefix` bits (`0..=128`, larger values mean 128),
    /// as [`PeerIp::ipv6_prefix`](super::PeerIp::ipv6_prefix).
    #[must_use]
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.ipv6_prefix = prefix.min(128);
        self
    }

    /// Reads `header`, the one your proxies write (default `X-Forwarded-For`), and no other.
    ///
    /// ```
    /// use tollgate::key::{ClientIp, ProxyHeader};
    ///
    /// let key = ClientIp::trusting(["10.0.0.0/8".parse()?]).header(ProxyHeader::Forwarded);
    /// # Ok::<(), ipnet::AddrParseError>(())
    /// ```
    #[must_use]
    pub fn header(mut self, header: ProxyHeader) -> Self {
        self.header = header;
        self
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The forwarding chain from the chosen header, leftmost first.
    fn chain(&self, req: &Parts) -> Vec<Hop> {
        self.header.hops(req)
    }

    /// The client's address given the (trusted) peer and the chain in front of it.
    fn client(&self, peer: IpAddr, chain: &[Hop]) -> IpAddr {
        let mut nearest_trusted = peer;
        for hop in chain.iter().rev() {
            match *hop {
                Hop::Ip(ip) if self.is_trusted(ip) => nearest_trusted = ip,
                Hop::Ip(ip) => return ip,
                Hop::Unknown => return nearest_trusted,
            }
        }
        // Every hop trusted: this is the leftmost one (the peer when there is no chain).
        nearest_trusted
    }
}

impl KeyExtractor for ClientIp {
    fn extract(&self, req: &Parts) -> Option<String> {
        let peer = peer_ip(req)?;
        let client = if self.is_trusted(peer) {
            self.client(peer, &self.chain(req))
        } else {
            peer
        };
        Some(ip_key(client, self.ipv6_prefix))
    }

    fn describe(&self) -> String {
        "the client's IP address".to_owned()
    }
}

/// `::ffff:10.0.0.0/104` is `10.0.0.0/8`: addresses are compared in their IPv4 form.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net {
        if let (Some(v4), Some(len)) = (
            v6.network().to_ipv4_mapped(),
            v6.prefix_len().checked_sub(96),
        ) {
            if let Ok(v4) = Ipv4Net::new(v4, len) {
                return IpNet::V4(v4.trunc());
            }
        }
    }
    net.trunc()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::ConnectInfo;
    use proptest::prelude::*;
    use std::net::SocketAddr;

    fn request(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let peer: SocketAddr = peer.parse().unwrap();
        let mut builder = http::Request::builder().extension(ConnectInfo(peer));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn nets(cidrs: &[&str]) -> ClientIp {
        ClientIp::trusting(cidrs.iter().map(|c| c.parse::<IpNet>().unwrap()))
    }

    fn key(extractor: &ClientIp, peer: &str, headers: &[(&str, &str)]) -> Option<String> {
        extractor.extract(&request(peer, headers))
    }

    #[test]
    fn default_trusts_nobody() {
        let req = [("x-forwarded-for", "1.2.3.4"), ("forwarded", "for=1.2.3.4")];
        assert_eq!(
            key(&ClientIp::default(), "203.0.113.5:80", &req).as_deref(),
            Some("203.0.113.5")
        );
    }

    #[test]
    fn spoofed_headers_ignored_from_untrusted_peer() {
        let ip = nets(&["10.0.0.0/8"]);
        let spoof = [
            ("x-forwarded-for", "10.0.0.1, 1.2.3.4"),
            ("forwarded", "for=5.6.7.8"),
            ("x-real-ip", "9.9.9.9"),
        ];
        assert_eq!(
            key(&ip, "203.0.113.5:80", &spoof).as_deref(),
            Some("203.0.113.5")
        );
    }

    #[test]
    fn rightmost_untrusted_through_two_trusted_proxies() {
        let ip = nets(&["10.0.0.0/8", "192.168.0.0/16"]);
        let headers = [(
            "x-forwarded-for",
            "6.6.6.6, 198.51.100.7, 192.168.1.1, 10.0.0.3",
        )];
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("198.51.100.7")
        );
    }

    #[test]
    fn all_trusted_uses_leftmost() {
        let ip = nets(&["10.0.0.0/8"]);
        let headers = [("x-forwarded-for", "10.1.1.1, 10.2.2.2")];
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("10.1.1.1")
        );
        // No header at all: the trusted peer itself.
        assert_eq!(key(&ip, "10.0.0.2:80", &[]).as_deref(), Some("10.0.0.2"));
    }

    #[test]
    fn unparsable_client_entry_falls_back_to_nearest_trusted() {
        let ip = nets(&["10.0.0.0/8"]);
        let headers = [("x-forwarded-for", "1.2.3.4, garbage, 10.0.0.9")];
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("10.0.0.9")
        );
        let ip = ip.header(ProxyHeader::Forwarded);
        let headers = [("forwarded", "for=1.2.3.4, for=_hidden")];
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("10.0.0.2")
        );
        let headers = [("forwarded", "for=unknown")];
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("10.0.0.2")
        );
    }

    #[test]
    fn forwarded_with_quoted_ipv6_and_ports() {
        let ip = nets(&["10.0.0.0/8", "2001:db8:ffff::/48"]).header(ProxyHeader::Forwarded);
        let headers = [(
            "forwarded",
            r#"for="[2001:db8:1:2::99]:4711";proto=https, for="[2001:db8:ffff::1]:80", for=10.0.0.7:8080"#,
        )];
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("2001:db8:1:2::/64")
        );
        assert_eq!(
            key(&ip.clone().ipv6_prefix(128), "10.0.0.2:80", &headers).as_deref(),
            Some("2001:db8:1:2::99")
        );
        let headers = [("forwarded", "for=192.0.2.60:1234;by=10.0.0.1")];
        assert_eq!(
            key(&ip, "[::ffff:10.0.0.2]:80", &headers).as_deref(),
            Some("192.0.2.60")
        );
    }

    #[test]
    fn repeated_headers_joined_in_order() {
        let ip = nets(&["10.0.0.0/8"]);
        let headers = [
            ("x-forwarded-for", "1.1.1.1, 203.0.113.1"),
            ("x-forwarded-for", "10.0.0.5"),
        ];
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("203.0.113.1")
        );
        let headers = [
            ("forwarded", "for=1.1.1.1"),
            ("forwarded", "for=203.0.113.2, for=10.0.0.5"),
        ];
        let ip = ip.header(ProxyHeader::Forwarded);
        assert_eq!(
            key(&ip, "10.0.0.2:80", &headers).as_deref(),
            Some("203.0.113.2")
        );
    }

    #[test]
    fn header_precedence_and_choice() {
        let ip = nets(&["10.0.0.0/8"]);
        let headers = [
            ("forwarded", "for=203.0.113.1"),
            ("x-forwarded-for", "203.0.113.2"),
            ("x-real-ip", "203.0.113.3"),
        ];
        let peer = "10.0.0.2:80";
        // X-Forwarded-For by default, whatever else the client sends.
        assert_eq!(key(&ip, peer, &headers).as_deref(), Some("203.0.113.2"));
        // Without it, the trusted peer itself is the key: a client's own Forwarded or
        // X-Real-IP is never believed.
        assert_eq!(
            key(&ip, peer, &[headers[0], headers[2]]).as_deref(),
            Some("10.0.0.2")
        );
        let only_forwarded = ip.clone().header(ProxyHeader::Forwarded);
        assert_eq!(
            key(&only_forwarded, peer, &headers).as_deref(),
            Some("203.0.113.1")
        );
        let only_real = ip.header(ProxyHeader::XRealIp);
        assert_eq!(
            key(&only_real, peer, &headers[..2]).as_deref(),
            Some("10.0.0.2")
        );
    }

    #[test]
    fn malformed_headers_fall_back_safely() {
        let ip = nets(&["10.0.0.0/8"]);
        let peer = "10.0.0.2:80";
        for value in [
            "",
            ",,,",
            "for=",
            "for=\"",
            "for=\"[2001:db8::1",
            "[::1",
            "300.1.1.1",
            "1.2.3.4:99999999999999999999",
            "for=[::1]]",
        ] {
            for name in ["forwarded", "x-forwarded-for", "x-real-ip"] {
                let got = key(&ip, peer, &[(name, value)]);
                assert!(got.is_some(), "{name}: {value:?}");
            }
        }
        // Bytes that are not UTF-8.
        let mut req = request(peer, &[]);
        req.headers.insert(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"\xff\xfe, \x80").unwrap(),
        );
        assert_eq!(ip.extract(&req).as_deref(), Some("10.0.0.2"));
    }

    #[test]
    fn trusted_ipv4_mapped_network() {
        let ip = nets(&["::ffff:10.0.0.0/104"]);
        let headers = [("x-forwarded-for", "203.0.113.4")];
        assert_eq!(
            key(&ip, "10.1.2.3:80", &headers).as_deref(),
            Some("203.0.113.4")
        );
    }

    #[test]
    fn no_peer_no_key() {
        let (req, ()) = http::Request::builder()
            .header("x-forwarded-for", "1.2.3.4")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(nets(&["0.0.0.0/0"]).extract(&req), None);
    }

    proptest! {
        #[test]
        fn never_panics_on_any_header_bytes(
            // Every byte a header value may hold, obs-text included.
            forwarded in proptest::collection::vec(
                prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff],
                0..120,
            ),
            xff in proptest::collection::vec(
                prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff],
                0..120,
            ),
        ) {
            let ip = nets(&["10.0.0.0/8"]);
            let mut req = request("10.0.0.2:80", &[]);
            let value = http::HeaderValue::from_bytes(&forwarded);
            prop_assert!(value.is_ok());
            if let Ok(value) = value {
                req.headers.insert("forwarded", value);
            }
            if let Ok(value) = http::HeaderValue::from_bytes(&xff) {
                req.headers.insert("x-forwarded-for", value);
            }
            prop_assert!(ip.extract(&req).is_some());
            prop_assert!(ip.clone().header(ProxyHeader::Forwarded).extract(&req).is_some());
            prop_assert!(ip.header(ProxyHeader::XRealIp).extract(&req).is_some());
        }

        #[test]
        fn client_cannot_choose_key_behind_proxy(
            spoof in "[ -~]{0,80}",
            client in any::<std::net::Ipv4Addr>(),
        ) {
            // Whatever the client writes, our proxy appends the address it saw.
            let ip = nets(&["10.0.0.0/8"]);
            let client = IpAddr::V4(client);
            prop_assume!(!ip.is_trusted(client));
            let value = format!("{spoof}, {client}");
            prop_assume!(http::HeaderValue::from_str(&value).is_ok());
            let got = key(&ip, "10.0.0.2:80", &[("x-forwarded-for", &value)]);
            prop_assert_eq!(got, Some(client.to_string()));
            let value = format!("{spoof}, for={client}");
            let ip = ip.header(ProxyHeader::Forwarded);
            let got = key(&ip, "10.0.0.2:80", &[("forwarded", &value)]);
            prop_assert_eq!(got, Some(client.to_string()));
        }
    }
}
