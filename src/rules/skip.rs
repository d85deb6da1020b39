//! [`CompiledSkip`]: one entry of requests the layer never limits, by route, by client key (an
//! allow-list of keys) or by client address (an allow-list of networks), compiled from the
//! public `Skip`'s settings (a [`SkipSpec`] each) or a rules file's `[[skip]]`.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use ipnet::IpNet;

use super::Route;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::{self, KeyExtractor};

/// A skip as the layer's builder is given it, built once the default key is known.
#[derive(Debug, Clone)]
pub(crate) enum SkipSpec {
    /// A path pattern.
    Path(String),
    /// Client keys, as the layer's default key reads them.
    Keys(Vec<String>),
    /// Networks: of the peer's address, or the client's as `ClientIp` reads it.
    Cidrs(Option<key::ClientIp>, Vec<IpNet>),
}

impl SkipSpec {
    /// The skip, with `default_key` reading the keys of a [`SkipSpec::Keys`].
    pub(crate) fn build(
        self,
        default_key: &Arc<dyn KeyExtractor>,
    ) -> Result<CompiledSkip, ConfigError> {
        let empty = |what: &str| {
            ConfigError::with_kind(
                ConfigErrorKind::Rule,
                format!("skip: no {what} given; list at least one"),
            )
        };
        match self {
            SkipSpec::Path(path) => Ok(CompiledSkip::route(
                Route::new(Vec::new(), Some(&path)).map_err(|e| e.context("skip"))?,
            )),
            SkipSpec::Keys(keys) if keys.is_empty() => Err(empty("keys")),
            SkipSpec::Keys(keys) => Ok(CompiledSkip::route(Route::default())
                .keys(Arc::clone(default_key), keys.into_iter().collect())),
            SkipSpec::Cidrs(_, cidrs) if cidrs.is_empty() => Err(empty("networks")),
            SkipSpec::Cidrs(client_ip, cidrs) => {
                Ok(CompiledSkip::route(Route::default()).cidrs(client_ip, cidrs))
            }
        }
    }
}

/// One skip entry, ready to match: it takes a request when every condition it sets holds (its
/// route, one of its keys, one of its networks).
#[derive(Clone)]
pub(crate) struct CompiledSkip {
    pub(crate) route: Route,
    keys: Option<KeyList>,
    cidrs: Option<NetList>,
}

/// The default key's extractor and the keys it must give.
#[derive(Clone)]
struct KeyList {
    key: Arc<dyn KeyExtractor>,
    keys: Arc<HashSet<String>>,
}

/// What reads the client's address (whole, IPv6 included) and the networks it must be in.
#[derive(Clone)]
struct NetList {
    ip: Arc<dyn KeyExtractor>,
    nets: Arc<[IpNet]>,
}

impl CompiledSkip {
    /// A skip of every request on `route`.
    pub(crate) fn route(route: Route) -> Self {
        Self {
            route,
            keys: None,
            cidrs: None,
        }
    }

    /// Takes only requests whose `key` (the layer's default key) is one of `keys`.
    pub(crate) fn keys(mut self, key: Arc<dyn KeyExtractor>, keys: HashSet<String>) -> Self {
        self.keys = Some(KeyList {
            key,
            keys: Arc::new(keys),
        });
        self
    }

    /// Takes only requests from an address in one of `cidrs`: the peer's, or with `client_ip`
    /// the client's as its trusted proxies report it.
    pub(crate) fn cidrs(mut self, client_ip: Option<key::ClientIp>, cidrs: Vec<IpNet>) -> Self {
        // The whole address (not an IPv6 /64), so that a network narrower than /64 works.
        let ip: Arc<dyn KeyExtractor> = match client_ip {
            Some(client_ip) => Arc::new(client_ip.ipv6_prefix(128)),
            None => Arc::new(key::PeerIp::default().ipv6_prefix(128)),
        };
        self.cidrs = Some(NetList {
            ip,
            nets: cidrs.into(),
        });
        self
    }

    /// Whether the skip, alone, takes the request: the reference the rule set's index is
    /// tested against.
    #[cfg(test)]
    pub(crate) fn matches(&self, parts: &Parts) -> bool {
        self.route.matches(parts) && self.takes(parts)
    }

    /// Whether the request meets the key and address conditions (the route is matched by
    /// the rule set's index).
    pub(crate) fn takes(&self, parts: &Parts) -> bool {
        let key_ok = self.keys.as_ref().is_none_or(|list| {
            (list.key.extract(parts)).is_some_and(|found| list.keys.contains(found.as_str()))
        });
        key_ok
            && self.cidrs.as_ref().is_none_or(|list| {
                (list.ip.extract(parts))
                    .and_then(|found| found.parse::<IpAddr>().ok())
                    .is_some_and(|found| list.nets.iter().any(|net| net.contains(&found)))
            })
    }
}

impl fmt::Debug for CompiledSkip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSkip")
            .field("route", &self.route)
            .field("keys", &self.keys.as_ref().map(|list| list.keys.len()))
            .field("cidrs", &self.cidrs.as_ref().map(|list| &list.nets))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    fn request(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().uri("/x");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let (mut parts, ()) = builder.body(()).unwrap().into_parts();
        parts.extensions.insert(peer.parse::<SocketAddr>().unwrap());
        parts
    }

    fn nets(cidrs: &[&str]) -> Vec<IpNet> {
        cidrs.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn keys_match_the_default_key_exactly() {
        let skip = CompiledSkip::route(Route::default()).keys(
            Arc::new(key::Header::new("x-api-key")),
            HashSet::from(["internal".to_owned()]),
        );
        assert!(skip.takes(&request("1.2.3.4:1", &[("x-api-key", "internal")])));
        assert!(!skip.takes(&request("1.2.3.4:1", &[("x-api-key", "internal2")])));
        assert!(!skip.takes(&request("1.2.3.4:1", &[])));
    }

    #[test]
    fn cidrs_match_the_peer_or_the_client_through_trusted_proxies() {
        let peer = CompiledSkip::route(Route::default())
            .cidrs(None, nets(&["10.0.0.0/8", "2001:db8::/96"]));
        assert!(peer.takes(&request("10.1.2.3:1", &[])));
        assert!(!peer.takes(&request("11.1.2.3:1", &[("x-forwarded-for", "10.0.0.1")])));
        // Narrower than an IPv6 /64: the whole address is compared.
        assert!(peer.takes(&request("[2001:db8::1]:1", &[])));
        assert!(!peer.takes(&request("[2001:db8::1:0:0:1]:1", &[])));

        let proxy = nets(&["192.168.0.0/16"]);
        let client = CompiledSkip::route(Route::default())
            .cidrs(Some(key::ClientIp::trusting(proxy)), nets(&["10.0.0.0/8"]));
        assert!(client.takes(&request(
            "192.168.0.1:1",
            &[("x-forwarded-for", "10.9.9.9")]
        )));
        assert!(!client.takes(&request("192.168.0.1:1", &[("x-forwarded-for", "8.8.8.8")])));
        // An untrusted peer's header is not believed.
        assert!(!client.takes(&request("8.8.4.4:1", &[("x-forwarded-for", "10.9.9.9")])));
    }

    #[test]
    fn every_condition_must_hold() {
        let skip = CompiledSkip::route(Route::default())
            .keys(
                Arc::new(key::Header::new("x-api-key")),
                HashSet::from(["k".to_owned()]),
            )
            .cidrs(None, nets(&["10.0.0.0/8"]));
        assert!(skip.takes(&request("10.0.0.1:1", &[("x-api-key", "k")])));
        assert!(!skip.takes(&request("11.0.0.1:1", &[("x-api-key", "k")])));
        assert!(!skip.takes(&request("10.0.0.1:1", &[("x-api-key", "j")])));
    }
}
