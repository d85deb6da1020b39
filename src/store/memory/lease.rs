//! Leases from the memory store: as many units as the algorithm admits back to back, and
//! the exact return of unused ones.

use std::collections::hash_map::Entry;

use super::shard::{count_decision, lock, Tracked};
use super::MemoryStore;
use crate::algorithm::{self, State};
use crate::quota::Policy;
use crate::store::stack::Grant;

impl MemoryStore {
    /// Leases from `min` to `max` units without going through a future: see
    /// `StoreExt::acquire`.
    pub(crate) fn acquire_now(&self, key: &str, policy: &Policy, min: u32, max: u32) -> Grant {
        let now = self.inner.clock.now();
        let params = policy.params();
        let (map_key, shard_index) = self.locate(key, policy);
        let mut shard = lock(&self.inner.shards[shard_index]);
        count_decision(&mut shard, now);
        self.make_room_for(&mut shard, &map_key, now);
        let (min, max) = (u64::from(min), u64::from(max));
        let granted = match shard.entries.entry(map_key) {
            Entry::Occupied(mut occupied) => {
                let tracked = occupied.get_mut();
                if let Some(until) = tracked.live_block(policy.algorithm(), now) {
                    return Grant::new(0, algorithm::blocked(params, now, until, min), 0);
                }
                if !tracked.is_live(policy.algorithm(), now) {
                    tracked.state = State::new(policy.algorithm());
                    tracked.blocked_until = None;
                }
                let granted = tracked.state.acquire(params, now, min, max);
                tracked.expires_at = tracked.state.expires_at(params);
                granted
            }
            Entry::Vacant(vacant) => {
                let mut state = State::new(policy.algorithm());
                let granted = state.acquire(params, now, min, max);
                if granted.granted > 0 {
                    let expires_at = state.expires_at(params);
                    vacant.insert(Tracked {
                        state,
                        expires_at,
                        blocked_until: None,
                    });
                }
                granted
            }
        };
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
        let now = self.inner.clock.now();
        let params = policy.params();
        let (map_key, shard_index) = self.locate(key, policy);
        let mut shard = lock(&self.inner.shards[shard_index]);
        let Some(tracked) = shard.entries.get_mut(&map_key) else {
            return 0;
        };
        // A block replaced the state the lease was taken from: nothing to give back to.
        if !tracked.is_live(policy.algorithm(), now)
            || tracked.live_block(policy.algorithm(), now).is_some()
        {
            return 0;
        }
        let taken = tracked
            .state
            .release(params, now, u64::from(unused), grant.mark);
        tracked.expires_at = tracked.state.expires_at(params);
        u32::try_from(taken).unwrap_or(u32::MAX)
    }
}
