//! The in-memory store: zero setup, one process.

use std::collections::hash_map::Entry;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::quality::RandomState;

use crate::algorithm::{self, State};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::stack::{Check, Grant, StoreExt};
use crate::store::Store;

mod lease;
mod shard;
mod stacked;

use shard::{block_after, count_decision, lock, make_room, Shard, Tracked};

/// Keeps rate-limit state in this process, in independently locked shards.
///
/// Each decision locks one shard for a few hundred nanoseconds; there is no global lock.
/// Expired state is swept as the store is used (a shard is swept once it has seen as many
/// decisions as it holds keys, or on its next decision once every key its last sweep kept has
/// expired), so memory follows the keys that are live, not every key ever seen. A shard whose
/// table has far more room than live keys (after a flood of random keys) gives the room back.
/// [`max_keys`](Self::max_keys) caps it outright.
///
/// Clones share the same state.
///
/// ```
/// use tollgate::{store::MemoryStore, ManualClock};
///
/// let store = MemoryStore::new().max_keys(1_000_000);
/// let for_tests = MemoryStore::with_clock(ManualClock::new(0));
/// # let _ = (store, for_tests);
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    max_keys_per_shard: Option<usize>,
}

impl MemoryStore {
    /// A store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(SystemClock)
    }

    /// A store that reads time from `clock` (a [`ManualClock`](crate::ManualClock) in tests).
    pub fn with_clock(clock: impl Clock) -> Self {
        let parallelism = std::thread::available_parallelism().map_or(4, |n| n.get());
        let shards = (parallelism * 4).next_power_of_two().max(16);
        Self {
            inner: Arc::new(Inner {
                shards: (0..shards).map(|_| Mutex::default()).collect(),
                hasher: RandomState::default(),
                clock: Arc::new(clock),
                max_keys_per_shard: None,
            }),
        }
    }

    /// Tracks at most about `max` keys (per policy and client). When a shard is full and a new
    /// key arrives, expired state is swept, then if still full one tracked key is forgotten
    /// (it starts again with a whole quota). Without a cap, memory is bounded by live keys.
    #[must_use]
    pub fn max_keys(self, max: usize) -> Self {
        let shards = self.inner.shards.len();
        Self {
            inner: Arc::new(Inner {
                shards: (0..shards).map(|_| Mutex::default()).collect(),
                hasher: self.inner.hasher.clone(),
                clock: Arc::clone(&self.inner.clock),
                max_keys_per_shard: Some(max.div_ceil(shards).max(1)),
            }),
        }
    }

    /// How many keys are tracked now, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| lock(s).entries.len())
            .sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides without going through a future: the memory store never waits.
    pub fn check_now(&self, key: &str, policy: &Policy, cost: u32) -> Decision {
        let now = self.inner.clock.now();
        let params = policy.params();
        let (map_key, shard_index) = self.locate(key, policy);
        let mut shard = lock(&self.inner.shards[shard_index]);
        count_decision(&mut shard, now);
        self.make_room_for(&mut shard, &map_key, now);
        match shard.entries.entry(map_key) {
            Entry::Occupied(mut occupied) => {
                let tracked = occupied.get_mut();
                if let Some(until) = tracked.live_block(policy.algorithm(), now) {
                    return algorithm::blocked(params, now, until, u64::from(cost));
                }
                if !tracked.is_live(policy.algorithm(), now) {
                    tracked.state = State::new(policy.algorithm());
                    tracked.blocked_until = None;
                }
                let decision = tracked.state.check(params, now, u64::from(cost));
                tracked.expires_at = tracked.state.expires_at(params);
                if let Some(until) = block_after(&decision, policy, now) {
                    *tracked = Tracked::blocked(policy.algorithm(), until);
                    return algorithm::blocked(params, now, until, u64::from(cost));
                }
                decision
            }
            Entry::Vacant(vacant) => {
                let mut state = State::new(policy.algorithm());
                let decision = state.check(params, now, u64::from(cost));
                if decision.allowed {
                    let expires_at = state.expires_at(params);
                    vacant.insert(Tracked {
                        state,
                        expires_at,
                        blocked_until: None,
                    });
                } else if let Some(until) = block_after(&decision, policy, now) {
                    vacant.insert(Tracked::blocked(policy.algorithm(), until));
                    return algorithm::blocked(params, now, until, u64::from(cost));
                }
                decision
            }
        }
    }

    /// The decision [`check_now`](Self::check_now) would make now, made on a copy of the
    /// key's state: nothing is consumed or stored (see [`Store::peek`]).
    pub(crate) fn peek_now(&self, key: &str, policy: &Policy, cost: u32) -> Decision {
        let now = self.inner.clock.now();
        let algorithm = policy.algorithm();
        let (map_key, shard_index) = self.locate(key, policy);
        let tracked = lock(&self.inner.shards[shard_index])
            .entries
            .get(&map_key)
            .filter(|t| t.is_live(algorithm, now))
            .map(|t| (t.live_block(algorithm, now), t.state.clone()));
        match tracked {
            Some((Some(until), _)) => {
                algorithm::blocked(policy.params(), now, until, u64::from(cost))
            }
            Some((None, mut state)) => state.check(policy.params(), now, u64::from(cost)),
            None => State::new(algorithm).check(policy.params(), now, u64::from(cost)),
        }
    }

    /// Forgets `key`'s state under `policy`, and any block.
    fn reset_now(&self, key: &str, policy: &Policy) {
        let (map_key, shard_index) = self.locate(key, policy);
        lock(&self.inner.shards[shard_index])
            .entries
            .remove(&map_key);
    }

    /// Blocks `key` under `policy` for `duration_us` from now (0: a reset).
    fn block_now(&self, key: &str, policy: &Policy, duration_us: u64) {
        if duration_us == 0 {
            return self.reset_now(key, policy);
        }
        let now = self.inner.clock.now();
        let (map_key, shard_index) = self.locate(key, policy);
        let mut shard = lock(&self.inner.shards[shard_index]);
        self.make_room_for(&mut shard, &map_key, now);
        let until = now.saturating_add(duration_us);
        shard
            .entries
            .insert(map_key, Tracked::blocked(policy.algorithm(), until));
    }

    /// Gives `n` units back to `key` under `policy` (see `StoreExt::refund`).
    fn refund_now(&self, key: &str, policy: &Policy, n: u32) {
        let now = self.inner.clock.now();
        let params = policy.params();
        let (map_key, shard_index) = self.locate(key, policy);
        let mut shard = lock(&self.inner.shards[shard_index]);
        let Some(tracked) = shard.entries.get_mut(&map_key) else {
            return;
        };
        let algorithm = policy.algorithm();
        if tracked.live_block(algorithm, now).is_some() || !tracked.is_live(algorithm, now) {
            return;
        }
        tracked.state.refund(params, now, u64::from(n));
        tracked.expires_at = tracked.state.expires_at(params);
    }

    /// Makes room for `map_key` in a full shard that does not hold it yet (when `max_keys` is
    /// set).
    fn make_room_for(&self, shard: &mut Shard, map_key: &str, now: u64) {
        let full = self
            .inner
            .max_keys_per_shard
            .is_some_and(|max| shard.entries.len() >= max);
        if full && !shard.entries.contains_key(map_key) {
            make_room(shard, now);
        }
    }

    /// The map key for `key` under `policy`, and the index of the shard that holds it.
    fn locate(&self, key: &str, policy: &Policy) -> (String, usize) {
        let mut map_key = String::with_capacity(policy.name().len() + 1 + key.len());
        map_key.push_str(policy.name());
        map_key.push('\0');
        map_key.push_str(key);
        let shard_index = self.inner.hasher.hash_one(&map_key) as usize % self.inner.shards.len();
        (map_key, shard_index)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.inner.shards.len())
            .field("clock", &self.inner.clock)
            .field("max_keys_per_shard", &self.inner.max_keys_per_shard)
            .finish_non_exhaustive()
    }
}

impl Store for MemoryStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        Ok(self.check_now(key, policy, cost))
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        Ok(self.peek_now(key, policy, cost))
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.reset_now(key, policy);
        Ok(())
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        self.block_now(key, policy, micros);
        Ok(())
    }
}

impl StoreExt for MemoryStore {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        Ok(self.check_many_now(checks))
    }

    fn clock(&self) -> Option<&dyn Clock> {
        Some(&*self.inner.clock)
    }

    /// Always: the memory store decides at once.
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        Some(self.check_now(key, policy, cost))
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.refund_now(key, policy, n);
        Ok(())
    }

    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        Ok(self.acquire_now(key, policy, min, max))
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        Ok(self.release_now(key, policy, unused, grant))
    }
}

#[cfg(test)]
mod tests;
