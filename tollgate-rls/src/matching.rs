//! Which limit applies to a descriptor, the reference's way: each entry is looked up as
//! `key_value`, then among the wildcard patterns of its level, then as `key` alone; the limit
//! is the one found at the descriptor's last entry. Also the names the reference gives the
//! match: the statistics key and the counter's key.

use std::borrow::Cow;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

use smallvec::SmallVec;

use super::config::{Limit, Node, RlsConfig};

/// The limit a descriptor matched, with the keys it is counted and reported under.
#[derive(Debug)]
pub(crate) struct Matched<'c> {
    pub(crate) limit: LimitRef<'c>,
    /// The reference's statistics key (detailed or not, with `value_to_metric`).
    pub(crate) stats_key: Cow<'c, str>,
    /// For each entry, the wildcard pattern that stands for its value in the counter's key
    /// (`share_threshold`), if any; empty when none does.
    pub(crate) shared: Vec<Option<&'c str>>,
}

/// A limit from the configuration, or one made for this request (Envoy's own limit), boxed
/// so that a request's plan stays small.
#[derive(Debug)]
pub(crate) enum LimitRef<'c> {
    Config(&'c Limit),
    Owned(Box<Limit>),
}

impl std::ops::Deref for LimitRef<'_> {
    type Target = Limit;

    fn deref(&self) -> &Limit {
        match self {
            LimitRef::Config(limit) => limit,
            LimitRef::Owned(limit) => limit,
        }
    }
}

/// How a descriptor's entry matched at its level.
enum How<'c> {
    /// As `key_value`.
    Value,
    /// As a wildcard pattern (the child's key, `key_pattern`).
    Wildcard(&'c str),
    /// As `key` alone (the key's default).
    Key,
}

impl RlsConfig {
    /// The limit for `descriptor` in `domain`: `Ok(None)` when the domain is known and
    /// nothing matches, `Err(())` when the domain is unknown. A descriptor that carries its
    /// own limit (Envoy's `limit` override) is handled by the caller.
    pub(crate) fn get_limit<'c>(
        &'c self,
        domain: &str,
        descriptor: &RateLimitDescriptor,
    ) -> Result<Option<Matched<'c>>, ()> {
        let root = self.domains.get(domain).ok_or(())?;
        Ok(lookup(root, domain, descriptor))
    }

    /// Whether `domain` is configured.
    pub(crate) fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }
}

fn lookup<'c>(root: &'c Node, domain: &str, d: &RateLimitDescriptor) -> Option<Matched<'c>> {
    let entries = &d.entries;
    let mut level = root;
    let mut found: Option<&'c Arc<Limit>> = None;
    let mut shared: Vec<Option<&'c str>> = Vec::new();
    // Per entry, the value the statistics key shows (None: the key alone), and whether that
    // key can differ from the limit's own name (only `value_to_metric` makes it differ).
    let mut shown: SmallVec<[Option<&str>; 4]> = SmallVec::new();
    let mut differs = false;
    let mut final_key = String::with_capacity(64);
    for (i, entry) in entries.iter().enumerate() {
        final_key.clear();
        final_key.push_str(&entry.key);
        final_key.push('_');
        final_key.push_str(&entry.value);
        let mut next = level.children.get(&final_key).map(|n| (n, How::Value));
        if next.is_none() {
            next = (level.wildcards.iter())
                .find(|w| wildcard_match(&w.parts, &final_key))
                .and_then(|w| Some((level.children.get(&w.key)?, How::Wildcard(&w.key))));
        }
        if next.is_none() {
            next = level.children.get(&entry.key).map(|n| (n, How::Key));
        }
        let Some((node, how)) = next else {
            shown.push(None);
            break;
        };
        let value: Option<&str> = match how {
            How::Wildcard(pattern) => {
                let pattern = pattern_value(pattern, &entry.key);
                if node.share_threshold {
                    shared.resize(i, None);
                    shared.push(Some(pattern));
                    Some(pattern)
                } else if node.value_to_metric {
                    differs = true;
                    Some(&entry.value)
                } else {
                    Some(pattern)
                }
            }
            How::Value => Some(&entry.value),
            How::Key if node.value_to_metric => {
                differs = true;
                Some(&entry.value)
            }
            How::Key => None,
        };
        shown.push(value);
        if i + 1 == entries.len() {
            found = node.limit.as_ref();
        }
        if node.children.is_empty() {
            break;
        }
        level = node;
    }
    let limit = found?;
    let stats_key = if limit.detailed_metric {
        Cow::Owned(detailed_key(domain, d, &shared))
    } else if differs {
        let mut key = String::from(domain);
        for (entry, value) in entries.iter().zip(&shown) {
            key.push('.');
            key.push_str(&entry.key);
            if let Some(value) = value.filter(|v| !v.is_empty()) {
                key.push('_');
                key.push_str(value);
            }
        }
        Cow::Owned(key)
    } else {
        Cow::Borrowed(limit.full_key.as_str())
    };
    Some(Matched {
        limit: LimitRef::Config(limit.as_ref()),
        stats_key,
        shared,
    })
}

/// The value part of a wildcard child's key: `key_files*` for key `key` is `files*`.
fn pattern_value<'p>(pattern: &'p str, key: &str) -> &'p str {
    pattern
        .strip_prefix(key)
        .and_then(|rest| rest.strip_prefix('_'))
        .unwrap_or(pattern)
}

/// The reference's detailed statistics key (`detailed_metric`): `domain.key1_value1.key2_`,
/// every entry as `key_value`, an empty value too (`k_`). When a `share_threshold` pattern
/// stands for a value, the entries are written as [`override_key`] writes them, with the
/// pattern in place of the value.
fn detailed_key(domain: &str, d: &RateLimitDescriptor, shared: &[Option<&str>]) -> String {
    if shared.iter().any(Option::is_some) {
        return entries_key(domain, d, shared);
    }
    let mut key = String::from(domain);
    for entry in &d.entries {
        key.push('.');
        key.push_str(&entry.key);
        key.push('_');
        key.push_str(&entry.value);
    }
    key
}

/// `domain.key1_value1.key2`: every entry with its value (or its shared pattern), the key
/// alone when the value is empty.
fn entries_key(domain: &str, d: &RateLimitDescriptor, shared: &[Option<&str>]) -> String {
    let mut key = String::from(domain);
    for (i, entry) in d.entries.iter().enumerate() {
        key.push('.');
        key.push_str(&entry.key);
        let value = shared.get(i).copied().flatten().unwrap_or(&entry.value);
        if !value.is_empty() {
            key.push('_');
            key.push_str(value);
        }
    }
    key
}

/// Whether `value` matches a pattern split on `*` (each `*` matches any run of characters,
/// the empty one included).
pub(super) fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|only| only == value);
    };
    let Some(rest) = value.strip_prefix(first.as_str()) else {
        return false;
    };
    let Some(mut rest) = rest.strip_suffix(last.as_str()) else {
        return false;
    };
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The key a descriptor's counter is kept under: its domain and every entry, each value
/// replaced by its shared pattern where there is one. Length-prefixed, so no two
/// descriptors share a key by accident.
pub(crate) fn client_key(domain: &str, d: &RateLimitDescriptor, shared: &[Option<&str>]) -> String {
    let value = |i: usize, entry: &Entry| -> usize {
        shared
            .get(i)
            .copied()
            .flatten()
            .map_or(entry.value.len(), str::len)
    };
    // Each part and up to 21 bytes of length and separators: one allocation.
    let size = (d.entries.iter().enumerate())
        .map(|(i, e)| e.key.len() + value(i, e) + 2 * 21)
        .sum::<usize>()
        + domain.len()
        + 21;
    let mut key = String::with_capacity(size);
    push_part(&mut key, domain);
    for (i, entry) in d.entries.iter().enumerate() {
        push_part(&mut key, &entry.key);
        let value = shared.get(i).copied().flatten().unwrap_or(&entry.value);
        push_part(&mut key, value);
    }
    key
}

fn push_part(key: &mut String, part: &str) {
    let mut digits = itoa::Buffer::new();
    key.push_str(digits.format(part.len()));
    key.push(':');
    key.push_str(part);
    key.push(',');
}

/// The reference's name for a descriptor with Envoy's own limit: `domain.key1_value1.key2`.
pub(crate) fn override_key(domain: &str, d: &RateLimitDescriptor) -> String {
    entries_key(domain, d, &[])
}
