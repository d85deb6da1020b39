//! The values of a rules file that are written as text, each read by a `FromStr` while the
//! file is deserialized, so toml points any error at the value itself.

use std::fmt;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use ipnet::IpNet;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

use crate::key::{self, KeyExtractor};
use crate::lease::Lease;
use crate::quota::parse_period;
use crate::rules::{parse_methods, StatusMatch, COUNT_STATUS_ALLOWED};

/// A `T` written as text, e.g. a quota `"5/min"`, read by `T`'s `FromStr`.
#[derive(Debug, Clone)]
pub(super) struct Text<T>(pub(super) T);

impl<'de, T> Deserialize<'de> for Text<T>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor(PhantomData))
    }
}

/// Reads the text inside the deserializer's visit, where toml notes the value's span on an
/// error (even for an entry of a list).
struct TextVisitor<T>(PhantomData<T>);

impl<T> Visitor<'_> for TextVisitor<T>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    type Value = Text<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<T>, E> {
        text.parse().map(Text).map_err(E::custom)
    }
}

/// `max_cost`: a whole number from 1 to `u32::MAX`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "i64")]
pub(super) struct MaxCost(pub(super) u32);

impl TryFrom<i64> for MaxCost {
    type Error = String;

    fn try_from(n: i64) -> Result<Self, String> {
        u32::try_from(n)
            .ok()
            .filter(|&n| n >= 1)
            .map(MaxCost)
            .ok_or_else(|| {
                format!(
                    "max_cost {n} is out of range (use a whole number from 1 to {})",
                    u32::MAX
                )
            })
    }
}

/// `in_flight`: how many of a client's requests may run at once, a whole number from 1 to
/// `u32::MAX`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(try_from = "i64")]
pub(super) struct InFlightMax(pub(super) u32);

impl TryFrom<i64> for InFlightMax {
    type Error = String;

    fn try_from(n: i64) -> Result<Self, String> {
        u32::try_from(n)
            .ok()
            .filter(|&n| n >= 1)
            .map(InFlightMax)
            .ok_or_else(|| {
                format!(
                    "in_flight {n} is out of range (use a whole number from 1 to {}: the \
                     requests of one client running at once)",
                    u32::MAX
                )
            })
    }
}

/// `max_delay`: a duration such as `"500ms"` or `"2s"`.
#[derive(Debug, Clone, Copy)]
pub(super) struct MaxDelay(pub(super) Duration);

impl FromStr for MaxDelay {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_period(s).map(MaxDelay).map_err(|why| {
            format!(
                "invalid duration {s:?}: {why}; write a number and a unit, e.g. \"500ms\" or \"2s\""
            )
        })
    }
}

/// A header name (`cost_header`, `header:NAME` in a key). Refuses what `HeaderName` refuses,
/// so a header can never silently match nothing.
#[derive(Debug, Clone)]
pub(super) struct Header(pub(super) HeaderName);

impl FromStr for Header {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        HeaderName::from_bytes(s.as_bytes())
            .map(Header)
            .map_err(|_| {
                format!(
                    "invalid header name {s:?} (use letters, digits and '-', e.g. \"x-api-key\")"
                )
            })
    }
}

/// One entry of `methods`.
#[derive(Debug, Clone)]
pub(super) struct Method(pub(super) http::Method);

impl FromStr for Method {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut parsed = parse_methods([s]).map_err(|e| {
            format!("{e} (use method names such as GET, POST, PUT, PATCH or DELETE)")
        })?;
        Ok(Method(parsed.remove(0)))
    }
}

/// One entry of `trusted_proxies`: a network, or a bare address meaning just that address.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cidr(pub(super) IpNet);

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let text = s.trim();
        text.parse::<IpNet>()
            .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
            .map(Cidr)
            .map_err(|_| {
                format!(
                    "invalid CIDR {text:?} (use a network such as \"10.0.0.0/8\" or \
                     \"2001:db8::/32\", or a single address)"
                )
            })
    }
}

/// What `key` values are allowed, for error messages.
const KEYS_ALLOWED: &str = "use ip, client_ip, header:NAME, path, method or global, or several \
                            joined by \" or \", e.g. \"header:x-api-key or ip\"";

/// A `key`: `"ip"`, `"header:x-api-key or ip"`, ...; never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeySpec(Vec<KeyPart>);

/// One alternative of a `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeyPart {
    PeerIp,
    ClientIp,
    Header(HeaderName),
    Path,
    Method,
    Global,
}

impl KeySpec {
    /// The default key: the peer's address.
    pub(super) fn peer_ip() -> Self {
        Self(vec![KeyPart::PeerIp])
    }

    /// Whether the key reads the client's address through trusted proxies.
    pub(super) fn uses_client_ip(&self) -> bool {
        self.0.contains(&KeyPart::ClientIp)
    }

    /// The extractor, with `proxies` trusted by a `client_ip` part.
    pub(super) fn extractor(&self, proxies: &[IpNet]) -> Arc<dyn KeyExtractor> {
        let one = |part: &KeyPart| -> Arc<dyn KeyExtractor> {
            match part {
                KeyPart::PeerIp => Arc::new(key::PeerIp::default()),
                KeyPart::ClientIp => Arc::new(key::ClientIp::trusting(proxies.iter().copied())),
                KeyPart::Header(name) => Arc::new(key::Header::new(name.as_str())),
                KeyPart::Path => Arc::new(key::Path),
                KeyPart::Method => Arc::new(key::Method),
                KeyPart::Global => Arc::new(key::Global),
            }
        };
        let mut parts = self.0.iter().map(one);
        let first = parts
            .next()
            .unwrap_or_else(|| Arc::new(key::PeerIp::default()));
        parts.fold(first, |chain, next| Arc::new(chain.or(next)))
    }
}

impl FromStr for KeySpec {
    type Err = String;

    fn from_str(spec: &str) -> Result<Self, String> {
        let part = |part: &str| match part.trim() {
            "ip" => Ok(KeyPart::PeerIp),
            "client_ip" => Ok(KeyPart::ClientIp),
            "path" => Ok(KeyPart::Path),
            "method" => Ok(KeyPart::Method),
            "global" => Ok(KeyPart::Global),
            other => match other.strip_prefix("header:") {
                Some(name) => name
                    .trim()
                    .to_ascii_lowercase()
                    .parse()
                    .map(|Header(name)| KeyPart::Header(name))
                    .map_err(|why| format!("key {spec:?}: {why}")),
                None => Err(format!(
                    "unknown key {other:?} in {spec:?} ({KEYS_ALLOWED})"
                )),
            },
        };
        spec.split(" or ")
            .map(part)
            .collect::<Result<_, _>>()
            .map(KeySpec)
    }
}

/// `count_status`: a code (`401`), a class (`"4xx"`), or a list mixing them
/// (`[401, 403, "5xx"]`). Each entry is checked as it is read, so an error points at it.
#[derive(Debug, Clone)]
pub(super) struct StatusList(pub(super) Vec<StatusMatch>);

impl<'de> Deserialize<'de> for StatusList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StatusVisitor { list: true })
    }
}

/// One entry of a `count_status` list: a code or a class, not another list.
struct StatusEntry(StatusMatch);

impl<'de> Deserialize<'de> for StatusEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut one = deserializer
            .deserialize_any(StatusVisitor { list: false })?
            .0;
        one.pop()
            .map(StatusEntry)
            .ok_or_else(|| de::Error::custom("an empty entry"))
    }
}

/// Reads a code or a class, and when `list`, a list of them.
struct StatusVisitor {
    list: bool,
}

impl<'de> Visitor<'de> for StatusVisitor {
    type Value = StatusList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.list {
            "a status code, a class, or a list of them"
        } else {
            "a status code or a class"
        };
        write!(f, "{what} ({COUNT_STATUS_ALLOWED})")
    }

    fn visit_i64<E: de::Error>(self, code: i64) -> Result<StatusList, E> {
        u16::try_from(code)
            .ok()
            .map(StatusMatch::Code)
            .filter(|status| status.validate().is_ok())
            .map(|status| StatusList(vec![status]))
            .ok_or_else(|| {
                E::custom(format!(
                    "{code} is not an HTTP status ({COUNT_STATUS_ALLOWED})"
                ))
            })
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<StatusList, E> {
        text.parse::<StatusMatch>()
            .map(|status| StatusList(vec![status]))
            .map_err(|e| E::custom(e.message().trim_start_matches("count_status: ")))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<StatusList, A::Error> {
        if !self.list {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        let mut statuses = Vec::new();
        while let Some(StatusEntry(status)) = seq.next_element()? {
            statuses.push(status);
        }
        Ok(StatusList(statuses))
    }
}

/// `lease`: `"auto"` or a whole number of tokens from 1.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseSetting(pub(super) Lease);

impl<'de> Deserialize<'de> for LeaseSetting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LeaseVisitor)
    }
}

struct LeaseVisitor;

impl Visitor<'_> for LeaseVisitor {
    type Value = LeaseSetting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"auto\" or a whole number of tokens from 1")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<LeaseSetting, E> {
        if text != "auto" {
            return Err(E::custom(format!(
                "invalid lease {text:?} (use \"auto\" or a whole number of tokens from 1, \
                 e.g. lease = 50)"
            )));
        }
        Ok(LeaseSetting(Lease::Auto))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<LeaseSetting, E> {
        u32::try_from(n)
            .ok()
            .filter(|&n| n >= 1)
            .map(|n| LeaseSetting(Lease::tokens(n)))
            .ok_or_else(|| {
                E::custom(format!(
                    "lease {n} is out of range (use \"auto\" or a whole number of tokens from 1 \
                     to {})",
                    u32::MAX
                ))
            })
    }
}
