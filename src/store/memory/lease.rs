//! Leases from the memory store: as many units as the algorithm admits back to back, and
//! the exact return of unused ones.

use super::shard::lock;
use super::MemoryStore;
use crate::algorithm;
use crate::quota::Policy;
use crate::store::grant::Grant;

impl MemoryStore {
    /// Leases from `min` to `max` units without going through a future: see
    /// `StoreExt::acquire`.
    pub(crate) fn acquire_now(&self, key: &str, policy: &Policy, min: u32, max: u32) -> Grant {
        let now = self.inner.clock.now();
        let p = policy.params();
        let (hash, shard) = self.locate(key);
        let mut shard = lock(shard);
        let hasher = &self.inner.hasher;
        shard.count_decision(now, hasher);
        self.make_room_for(&mut shard, policy, key, hash, now);
        let (min, max) = (u64::from(min), u64::from(max));
        let table = shard.table(policy);
        if let Some(until) = table.live_block(key, hash, now) {
            return Grant::new(0, algorithm::blocked(p, now, until, min), 0);
        }
        let granted = table.decide_with(key, hash, p, now, hasher, |state| {
            let granted = state.acquire(p, now, min, max);
            (granted, granted.granted > 0)
        });
        let units = u32::try_from(granted.granted).unwrap_or(u32::MAX);
        Grant::new(units, granted.decision, granted.mark)
    }

    /// Gives back unused units of a lease without going through a future: see
    /// `StoreExt::release`.
    pub(crate) fn release_now(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> u32 {
        // Nothing to give back: the state is not touched (not even read in another scale), as
        // on every store.
        if unused == 0 {
            return 0;
        }
        let now = self.inner.clock.now();
        let (hash, shard) = self.locate(key);
        let mut shard = lock(shard);
        let Some(table) = shard.find_mut(policy) else {
            return 0;
        };
        // A block replaced the state the lease was taken from: nothing to give back to.
        let p = policy.params();
        let taken = table.update(key, hash, p, now, |state| {
            state.release(p, now, u64::from(unused), grant.mark)
        });
        u32::try_from(taken.unwrap_or(0)).unwrap_or(u32::MAX)
    }
}
