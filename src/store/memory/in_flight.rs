//! [`SlotCounts`]: the memory store's requests in flight, a count per client and limit.
//!
//! One process holds every slot it counts, and each is given back by a guard that cannot be
//! skipped, so no slot needs an id or a lease here: a count is exact.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::key_hasher::KeyHasher;
use crate::algorithm::slots::slot_decision;
use crate::decision::Decision;
use crate::quota::InFlight;

/// How many independently locked parts the counts are spread over.
const SHARDS: usize = 16;

/// The slots held per `<limit name>:<client key>` (a limit's name has no `:`), in shards.
pub(super) struct SlotCounts {
    shards: Box<[Mutex<HashMap<String, u32>>]>,
    hasher: KeyHasher,
}

impl SlotCounts {
    pub(super) fn new(hasher: KeyHasher) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher,
        }
    }

    /// Takes a slot of `key` under `limit` if fewer than its `max` are held.
    pub(super) fn take(&self, key: &str, limit: &InFlight) -> Decision {
        let name = Self::name(key, limit);
        let mut shard = self.shard(&name);
        let held = shard.entry(name).or_insert(0);
        let allowed = *held < limit.max();
        if allowed {
            *held += 1;
        }
        slot_decision(allowed, limit.max(), *held)
    }

    /// Gives one slot of `key` under `limit` back (none if none is held).
    pub(super) fn give_back(&self, key: &str, limit: &InFlight) {
        let name = Self::name(key, limit);
        let mut shard = self.shard(&name);
        if let Some(held) = shard.get_mut(&name) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                shard.remove(&name);
            }
        }
    }

    /// How many slots of `key` under `limit` are held.
    #[cfg(test)]
    pub(super) fn held(&self, key: &str, limit: &InFlight) -> u32 {
        let name = Self::name(key, limit);
        self.shard(&name).get(&name).copied().unwrap_or(0)
    }

    fn name(key: &str, limit: &InFlight) -> String {
        let mut name = String::with_capacity(limit.name().len() + 1 + key.len());
        name.push_str(limit.name());
        name.push(':');
        name.push_str(key);
        name
    }

    fn shard(&self, name: &str) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        let index = self.hasher.hash(name.as_bytes()) as usize % SHARDS;
        // A count is never left half-changed: a panic elsewhere does not spoil it.
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
