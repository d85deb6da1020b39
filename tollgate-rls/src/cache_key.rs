//! The reference's cache key of a descriptor, without its window: what a fixed-window limit
//! counts under when it counts in the reference's keys, so that a reference instance and
//! tollgate-rls share each count during a swap.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use sha2::{Digest, Sha256};

/// The longest key kept as it is, in bytes (the window's start follows it). Values come from
/// clients: a longer key (a descriptor of several long values) would make Redis keep that much
/// per client per window, so it is replaced by a digest of its entries, and counted apart from
/// the reference's key for it. Envoy's descriptors (an address, a path, a header) stay well
/// below it.
pub(crate) const MAX_CACHE_KEY_BYTES: usize = 1024;

/// envoyproxy/ratelimit's `GenerateCacheKey` (`src/limiter/cache_key.go` lines 50-86) up to
/// the window: `prefix` (its `CACHE_KEY_PREFIX`), the domain and `_`, then each entry's key
/// and value, each followed by `_`, the `share_threshold` pattern standing in for the value
/// of an entry that has one (`shared`, by the entry's index). The store ends it with the
/// window's start in Unix seconds.
///
/// Past [`MAX_CACHE_KEY_BYTES`], the entries are replaced by `#` and the first 16 bytes of
/// their SHA-256 in hex, then `_`: `<prefix><domain>_#<digest>_`. The domain is one the
/// configuration names and the prefix the operator's, so only the entries are the clients'.
pub(crate) fn cache_key(
    prefix: &str,
    domain: &str,
    d: &RateLimitDescriptor,
    shared: &[Option<&str>],
) -> String {
    let value = |i: usize| shared.get(i).copied().flatten();
    let entries_len: usize = (d.entries.iter().enumerate())
        .map(|(i, e)| e.key.len() + value(i).map_or(e.value.len(), str::len) + 2)
        .sum();
    let head = prefix.len() + domain.len() + 1;
    let mut key = String::with_capacity(head + entries_len.min(MAX_CACHE_KEY_BYTES) + 12);
    key.push_str(prefix);
    key.push_str(domain);
    key.push('_');
    if head + entries_len <= MAX_CACHE_KEY_BYTES {
        for (i, entry) in d.entries.iter().enumerate() {
            key.push_str(&entry.key);
            key.push('_');
            key.push_str(value(i).unwrap_or(&entry.value));
            key.push('_');
        }
        return key;
    }
    let mut digest = Sha256::new();
    for (i, entry) in d.entries.iter().enumerate() {
        digest.update(entry.key.as_bytes());
        digest.update(b"_");
        digest.update(value(i).unwrap_or(&entry.value).as_bytes());
        digest.update(b"_");
    }
    key.push('#');
    for b in digest.finalize().iter().take(16) {
        key.push_str(&format!("{b:02x}"));
    }
    key.push('_');
    key
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    use super::*;

    fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: (entries.iter())
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The reference's own expectations (`test/limiter/base_limiter_test.go` and
    /// `test/redis/fixed_cache_impl_test.go` use keys such as `domain_key_value_1234`).
    #[test]
    fn the_references_layout() {
        let d = descriptor(&[("key", "value")]);
        assert_eq!(cache_key("", "domain", &d, &[]), "domain_key_value_");
        let d = descriptor(&[("remote_address", "10.0.0.1"), ("path", "/api")]);
        assert_eq!(
            cache_key("prefix:", "edge", &d, &[]),
            "prefix:edge_remote_address_10.0.0.1_path_/api_"
        );
        let d = descriptor(&[("key", "")]);
        assert_eq!(cache_key("", "domain", &d, &[]), "domain_key__");
        let d = descriptor(&[("user", "alice"), ("file", "files/a.txt")]);
        assert_eq!(
            cache_key("", "d", &d, &[None, Some("files/*")]),
            "d_user_alice_file_files/*_"
        );
    }

    #[test]
    fn long_keys_are_digested_after_the_domain() {
        let long = "x".repeat(MAX_CACHE_KEY_BYTES);
        let d = descriptor(&[("key", &long)]);
        let key = cache_key("p_", "domain", &d, &[]);
        assert!(key.starts_with("p_domain_#"), "{key}");
        assert_eq!(key.len(), "p_domain_#".len() + 32 + 1);
        assert!(key.ends_with('_'));
        let just = "x".repeat(MAX_CACHE_KEY_BYTES - "d_key__".len());
        let d = descriptor(&[("key", &just)]);
        assert_eq!(cache_key("", "d", &d, &[]).len(), MAX_CACHE_KEY_BYTES);
    }
}
