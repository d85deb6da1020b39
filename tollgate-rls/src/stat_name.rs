//! Statistics keys as the reference names them: its `SanitizeStatName`, then the labels its
//! Prometheus mapping takes from the key, each of bounded length.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// The labels the reference's Prometheus mapping (`src/stats/prom/default_mapper.yaml`) takes
/// from a statistics key once sanitized: the domain, the first entry and, when there is one,
/// the second; later entries are not labels. Each is at most [`MAX_LABEL_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Labels {
    pub(crate) domain: String,
    pub(crate) key1: String,
    pub(crate) key2: Option<String>,
}

/// The longest label value kept whole, in bytes. A longer one (a client can send any value)
/// becomes its first [`KEPT_PREFIX_LEN`] bytes, `#` and 16 hex digits of its SHA-256: still
/// one series per value, each of bounded size.
pub(crate) const MAX_LABEL_LEN: usize = 128;

const KEPT_PREFIX_LEN: usize = 96;

impl Labels {
    /// The labels of `stats_key` (`domain.key1_value1.key2_value2…`).
    pub(crate) fn of(stats_key: &str) -> Self {
        let key = sanitize_stat_name(stats_key);
        let mut parts = key.split('.');
        let domain = parts.next().unwrap_or("");
        let key1 = parts.next().unwrap_or("");
        let key2 = parts.next().filter(|k| !k.is_empty());
        Self {
            domain: bounded(domain),
            key1: bounded(key1),
            key2: key2.map(bounded),
        }
    }
}

/// `value`, or its bounded form when it is longer than [`MAX_LABEL_LEN`].
fn bounded(value: &str) -> String {
    if value.len() <= MAX_LABEL_LEN {
        return value.to_owned();
    }
    let mut cut = KEPT_PREFIX_LEN;
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = String::with_capacity(cut + 17);
    out.push_str(&value[..cut]);
    out.push('#');
    for b in Sha256::digest(value.as_bytes()).iter().take(8) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The reference's `SanitizeStatName` (`src/utils/utilities.go`): `:` and `|` become `_`,
/// and so do the dots of every run shaped like an IPv4 address (`\d{1,3}(\.\d{1,3}){3}`,
/// matched leftmost first without overlaps, as Go's regexp does), so that an address in a
/// value stays one label.
pub(crate) fn sanitize_stat_name(name: &str) -> Cow<'_, str> {
    let bytes = name.as_bytes();
    let plain = !bytes.iter().any(|b| matches!(b, b':' | b'|'))
        && (0..bytes.len()).all(|at| ipv4_at(bytes, at).is_none());
    if plain {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len());
    let mut at = 0;
    let mut copied = 0;
    while at < bytes.len() {
        if let Some(end) = ipv4_at(bytes, at) {
            out.push_str(&name[copied..at]);
            out.push_str(&name[at..end].replace('.', "_"));
            at = end;
            copied = end;
        } else {
            at += 1;
        }
    }
    out.push_str(&name[copied..]);
    Cow::Owned(out.replace([':', '|'], "_"))
}

/// The end of the IPv4-shaped run starting at `at`, if one does: four groups of one to three
/// ASCII digits (the last as long as it can be) joined by dots.
fn ipv4_at(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at;
    for group in 0..4 {
        let start = i;
        while i < bytes.len() && i - start < 3 && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        if group < 3 {
            if bytes.get(i) != Some(&b'.') {
                return None;
            }
            i += 1;
        }
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the reference's `SanitizeStatName` (`src/utils/utilities.go`, lines 66-73) names
    /// them: `:` and `|` become `_`, and an IPv4 address's dots too.
    #[test]
    fn stat_names_are_sanitized_as_the_reference_does() {
        let cases = [
            (
                "edge.remote_address_10.0.0.1",
                "edge.remote_address_10_0_0_1",
            ),
            ("edge.path_/a:b|c", "edge.path_/a_b_c"),
            ("edge.version_1.2.3", "edge.version_1.2.3"),
            ("edge.ip_1234.5.6.7", "edge.ip_1234_5_6_7"),
            ("edge.ip_1.2.3.4567", "edge.ip_1_2_3_4567"),
            ("a.x_1.2.3.4.5.6.7.8", "a.x_1_2_3_4.5_6_7_8"),
            ("plain.key_value", "plain.key_value"),
        ];
        for (name, sanitized) in cases {
            assert_eq!(sanitize_stat_name(name), sanitized, "{name}");
        }
        assert!(matches!(
            sanitize_stat_name("edge.key_value"),
            Cow::Borrowed(_)
        ));
    }

    /// The reference's Prometheus mapping (`src/stats/prom/default_mapper.yaml`): `domain` and
    /// `key1` for two parts, `key2` as well for three or more, later ones dropped.
    #[test]
    fn labels_are_the_mappings_parts_of_the_sanitized_key() {
        let labels = Labels::of("edge.remote_address_10.0.0.1");
        assert_eq!(labels.domain, "edge");
        assert_eq!(labels.key1, "remote_address_10_0_0_1");
        assert_eq!(labels.key2, None);
        let labels = Labels::of("edge.tenant_a.user_b.path_c");
        assert_eq!(
            (labels.key1.as_str(), labels.key2.as_deref()),
            ("tenant_a", Some("user_b"))
        );
    }

    #[test]
    fn long_label_values_are_cut_and_stay_distinct() {
        let long_a = format!("edge.user_{}a", "x".repeat(500));
        let long_b = format!("edge.user_{}b", "x".repeat(500));
        let (a, b) = (Labels::of(&long_a), Labels::of(&long_b));
        assert_ne!(a.key1, b.key1);
        assert_eq!(a.key1.len(), KEPT_PREFIX_LEN + 17);
        assert!(a.key1.starts_with("user_xxx"));
        let exactly = format!("edge.{}", "k".repeat(MAX_LABEL_LEN));
        assert_eq!(Labels::of(&exactly).key1.len(), MAX_LABEL_LEN);
        // Cut on a character boundary.
        let wide = format!("edge.{}", "é".repeat(100));
        assert!(Labels::of(&wide).key1.len() <= KEPT_PREFIX_LEN + 17);
    }
}
