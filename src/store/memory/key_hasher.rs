//! [`KeyHasher`]: how the memory store hashes client keys, for its tables' home cells.

use std::hash::{BuildHasher, Hasher};

use foldhash::quality::RandomState;

/// The store's hasher of client keys, seeded at random per store: faster than SipHash, and
/// clients (who choose their keys) cannot aim at its buckets.
#[derive(Clone, Default)]
pub(super) struct KeyHasher(RandomState);

impl KeyHasher {
    /// The key's bytes in one write, which mixes in their length: no length written first,
    /// as `hash_one` would (that makes a prefix-free hash of several values; this is one).
    /// Out of line: inlined, it costs its callers more in registers than the call.
    #[inline(never)]
    pub(super) fn hash(&self, key: &[u8]) -> u64 {
        let mut hasher = self.0.build_hasher();
        hasher.write(key);
        hasher.finish()
    }
}
