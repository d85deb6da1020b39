//! [`KeyHasher`]: how the memory store hashes client keys, for its tables' home cells.

use foldhash::quality::RandomState;

/// The store's hasher of client keys, seeded at random per store: faster than SipHash, and
/// clients (who choose their keys) cannot aim at its buckets.
#[derive(Clone, Default)]
pub(super) struct KeyHasher(RandomState);

impl KeyHasher {
    pub(super) fn hash(&self, key: &[u8]) -> u64 {
        std::hash::BuildHasher::hash_one(&self.0, key)
    }
}
