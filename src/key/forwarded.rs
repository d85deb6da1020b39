//! Parsing of the forwarding headers: RFC 7239 `Forwarded`, `X-Forwarded-For`, `X-Real-IP`.
//!
//! Every parser turns header values into the list of hops, leftmost (furthest from us) first.
//! A hop is an address or "unknown" (obfuscated identifiers, `unknown`, garbage). The parsers
//! are lenient and total: any bytes give some list, never a panic.
//!
//! Commas and semicolons split `Forwarded` even inside quotes. A real node (an address with an
//! optional port, an obfuscated identifier) never contains either, and splitting this way means
//! a client's unbalanced quote cannot swallow the elements our proxies append after it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One entry of a forwarding chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hop {
    /// A parsed address (IPv4-mapped IPv6 already turned into IPv4).
    Ip(IpAddr),
    /// Present but not an address: `unknown`, `_hidden`, malformed text, no `for=`.
    Unknown,
}

/// The `for=` hops of `Forwarded` header values, in order (several headers are one list).
pub(crate) fn parse_forwarded<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vec<Hop> {
    let mut hops = Vec::new();
    for value in values {
        for element in value.split(|&b| b == b',') {
            if trim(element).is_empty() {
                continue;
            }
            hops.push(forwarded_element(element));
        }
    }
    hops
}

/// One element, e.g. `for="[2001:db8::1]:4711";proto=https;by=203.0.113.43`.
fn forwarded_element(element: &[u8]) -> Hop {
    let mut found = None;
    for pair in element.split(|&b| b == b';') {
        let pair = trim(pair);
        let mut halves = pair.splitn(2, |&b| b == b'=');
        let (Some(name), Some(value)) = (halves.next(), halves.next()) else {
            continue;
        };
        let (name, value) = (trim(name), trim(value));
        if !name.eq_ignore_ascii_case(b"for") {
            continue;
        }
        if found.is_some() {
            // Two `for=` in one element: nobody can say which one is true.
            return Hop::Unknown;
        }
        found = Some(match unquote(value) {
            Some(node) => parse_node(&node),
            None => Hop::Unknown,
        });
    }
    found.unwrap_or(Hop::Unknown)
}

/// The content of a token or a quoted string (`\x` escapes resolved); `None` when a quote is
/// not closed.
fn unquote(value: &[u8]) -> Option<Vec<u8>> {
    let Some(inner) = value.strip_prefix(b"\"") else {
        return Some(value.to_vec());
    };
    let inner = inner.strip_suffix(b"\"")?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        if b == b'\\' {
            out.push(*bytes.next()?);
        } else {
            out.push(b);
        }
    }
    Some(out)
}

/// The hops of `X-Forwarded-For` (or `X-Real-IP`) values: comma lists, several headers joined
/// in order, addresses with optional ports, brackets or quotes.
pub(crate) fn parse_x_forwarded_for<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vec<Hop> {
    let mut hops = Vec::new();
    for value in values {
        for entry in value.split(|&b| b == b',') {
            let entry = trim(entry);
            if entry.is_empty() {
                continue;
            }
            let entry = entry
                .strip_prefix(b"\"")
                .and_then(|e| e.strip_suffix(b"\""))
                .unwrap_or(entry);
            hops.push(parse_node(entry));
        }
    }
    hops
}

/// A node: `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`; anything else (`unknown`, `_obfuscated`, garbage) is unknown.
pub(crate) fn parse_node(node: &[u8]) -> Hop {
    let Ok(node) = std::str::from_utf8(trim(node)) else {
        return Hop::Unknown;
    };
    let ip = if let Some(rest) = node.strip_prefix('[') {
        // `[v6]` with an optional `:port` after the bracket.
        rest.split_once(']').and_then(|(v6, after)| {
            let port_ok = after.is_empty() || after.starts_with(':');
            v6.parse::<Ipv6Addr>()
                .ok()
                .filter(|_| port_ok)
                .map(IpAddr::V6)
        })
    } else if let Ok(ip) = node.parse::<IpAddr>() {
        Some(ip)
    } else {
        // `v4:port`; a bare IPv6 address was handled above.
        node.split_once(':')
            .and_then(|(v4, _port)| v4.parse::<Ipv4Addr>().ok())
            .map(IpAddr::V4)
    };
    match ip {
        Some(ip) => Hop::Ip(ip.to_canonical()),
        None => Hop::Unknown,
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let is_space = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |i| i + 1);
    bytes.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> Hop {
        Hop::Ip(s.parse().unwrap())
    }

    fn forwarded(values: &[&str]) -> Vec<Hop> {
        parse_forwarded(values.iter().map(|v| v.as_bytes()))
    }

    fn xff(values: &[&str]) -> Vec<Hop> {
        parse_x_forwarded_for(values.iter().map(|v| v.as_bytes()))
    }

    #[test]
    fn forwarded_rfc_examples() {
        assert_eq!(forwarded(&[r#"for="_gazonk""#]), vec![Hop::Unknown]);
        assert_eq!(
            forwarded(&[r#"For="[2001:db8:cafe::17]:4711""#]),
            vec![ip("2001:db8:cafe::17")]
        );
        assert_eq!(
            forwarded(&["for=192.0.2.60;proto=http;by=203.0.113.43"]),
            vec![ip("192.0.2.60")]
        );
        assert_eq!(
            forwarded(&["for=192.0.2.43, for=198.51.100.17"]),
            vec![ip("192.0.2.43"), ip("198.51.100.17")]
        );
        assert_eq!(
            forwarded(&["for=unknown, for=\"192.0.2.8:8080\""]),
            vec![Hop::Unknown, ip("192.0.2.8")]
        );
    }

    #[test]
    fn forwarded_several_headers_and_odd_elements() {
        assert_eq!(
            forwarded(&["for=192.0.2.1", "proto=https, for=\"[::ffff:10.1.2.3]\""]),
            vec![ip("192.0.2.1"), Hop::Unknown, ip("10.1.2.3")]
        );
        // Empty elements are skipped; two `for=` in one element is unknown.
        assert_eq!(
            forwarded(&[" , for=192.0.2.1;for=192.0.2.2 ,, "]),
            vec![Hop::Unknown]
        );
        // An unclosed quote only spoils its own element.
        assert_eq!(
            forwarded(&["for=\"192.0.2.1, for=198.51.100.2"]),
            vec![Hop::Unknown, ip("198.51.100.2")]
        );
        // Escapes inside quoted strings.
        assert_eq!(forwarded(&[r#"for="192.0.2.\1""#]), vec![ip("192.0.2.1")]);
        assert_eq!(forwarded(&[r#"for="192.0.2.1\""#]), vec![Hop::Unknown]);
        // Unquoted IPv6 is accepted, as proxies write it.
        assert_eq!(forwarded(&["for=2001:db8::1"]), vec![ip("2001:db8::1")]);
    }

    #[test]
    fn x_forwarded_for_forms() {
        assert_eq!(
            xff(&[
                "203.0.113.1, 10.0.0.1:8080",
                "[2001:db8::1]:443,2001:db8::2, [2001:db8::3]"
            ]),
            vec![
                ip("203.0.113.1"),
                ip("10.0.0.1"),
                ip("2001:db8::1"),
                ip("2001:db8::2"),
                ip("2001:db8::3"),
            ]
        );
        assert_eq!(
            xff(&["unknown, , \"192.0.2.4\", 999.1.1.1, [::1]x, 1.2.3"]),
            vec![
                Hop::Unknown,
                ip("192.0.2.4"),
                Hop::Unknown,
                Hop::Unknown,
                Hop::Unknown
            ]
        );
        assert_eq!(xff(&["", " "]), vec![]);
    }

    #[test]
    fn non_utf8_is_unknown() {
        assert_eq!(
            parse_x_forwarded_for([&b"\xff\xfe, 192.0.2.1"[..]]),
            vec![Hop::Unknown, ip("192.0.2.1")]
        );
        assert_eq!(parse_forwarded([&b"for=\xff"[..]]), vec![Hop::Unknown]);
    }

    proptest! {
        #[test]
        fn parsers_never_panic_on_strings(a in ".*", b in ".*") {
            let _ = parse_forwarded([a.as_bytes(), b.as_bytes()]);
            let _ = parse_x_forwarded_for([a.as_bytes(), b.as_bytes()]);
        }

        #[test]
        fn parsers_never_panic_on_bytes(
            a in proptest::collection::vec(any::<u8>(), 0..200),
            b in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let _ = parse_forwarded([&a[..], &b[..]]);
            let _ = parse_x_forwarded_for([&a[..], &b[..]]);
        }

        #[test]
        fn parsers_never_panic_on_header_like_text(
            s in r#"([ ,;=\[\]:"\\_a-zA-Z0-9.]|for=|\[2001:db8::1\]){0,40}"#
        ) {
            let hops = parse_forwarded([s.as_bytes()]);
            prop_assert!(hops.len() <= s.len());
            let hops = parse_x_forwarded_for([s.as_bytes()]);
            prop_assert!(hops.len() <= s.len());
        }

        #[test]
        fn every_address_round_trips(addr in any::<IpAddr>(), port in any::<u16>()) {
            let expected = Hop::Ip(addr.to_canonical());
            let node = match addr {
                IpAddr::V4(v4) => format!("{v4}:{port}"),
                IpAddr::V6(v6) => format!("[{v6}]:{port}"),
            };
            prop_assert_eq!(parse_x_forwarded_for([node.as_bytes()]), vec![expected]);
            let value = format!("for=\"{node}\";proto=https");
            prop_assert_eq!(parse_forwarded([value.as_bytes()]), vec![expected]);
        }
    }
}
