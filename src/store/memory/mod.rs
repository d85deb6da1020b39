//! The in-memory store: zero setup, one process.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::{self, State};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{InFlightSlots, Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::slot::HeldSlot;
use crate::store::Store;

mod client_key;
mod in_flight;
mod key_hasher;
mod lease;
mod overrides;
mod shard;
mod slot_table;
mod stacked;
mod store_clock;
mod table;

use in_flight::SlotCounts;
use key_hasher::KeyHasher;
use overrides::Overrides;
use shard::{lock, Shard, ShardLock};
use store_clock::StoreClock;
pub(crate) use table::block_after;

/// Keeps rate-limit state in this process, in independently locked shards.
///
/// Each decision locks one shard for a few hundred nanoseconds; there is no global lock.
/// Expired state is swept as the store is used (a shard is swept once it has seen as many
/// decisions as it holds keys, or on its next decision once every key its last sweep kept has
/// expired), so memory follows the keys that are live, not every key ever seen. A shard whose
/// table has far more room than live keys (after a flood of random keys) gives the room back.
/// [`max_keys`](Self::max_keys) caps it outright.
///
/// A tracked GCRA or leaky-bucket key costs 32 bytes of table (its state and, up to 22 bytes
/// long, the key itself), about 70 bytes of memory with the table's free room; a decision hashes
/// the key once and allocates nothing unless the key is new. A rule whose clients have quotas
/// of their own ([`Rule::quota_from`](crate::rules::Rule::quota_from), overrides, tiers) keeps
/// each bucket state with the scale it is counted in, about 100 bytes of table, once one of its
/// clients is decided under another quota than the rule's.
///
/// Clones share the same state.
///
/// ```
/// use tollgate::{store::MemoryStore, clock::ManualClock};
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
    shards: Box<[ShardLock]>,
    hasher: KeyHasher,
    clock: StoreClock,
    max_keys_per_shard: Option<usize>,
    /// Quotas set for clients at run time.
    overrides: Overrides,
    /// The slots of requests in flight, counted per client and limit.
    in_flight: SlotCounts,
}

impl MemoryStore {
    /// A store on the system clock.
    pub fn new() -> Self {
        // The first read calibrates the clock: here, not in the first request.
        SystemClock.now();
        Self::with_clock(SystemClock)
    }

    /// A store that reads time from `clock` (a [`ManualClock`](crate::clock::ManualClock) in tests).
    pub fn with_clock(clock: impl Clock) -> Self {
        let parallelism = std::thread::available_parallelism().map_or(4, |n| n.get());
        // A power of two (see `shard_index`).
        let shards = (parallelism * 4).next_power_of_two().max(16);
        let hasher = KeyHasher::default();
        Self {
            inner: Arc::new(Inner {
                shards: (0..shards).map(|_| ShardLock::default()).collect(),
                in_flight: SlotCounts::new(hasher.clone()),
                hasher,
                clock: StoreClock::new(clock),
                max_keys_per_shard: None,
                overrides: Overrides::default(),
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
                shards: (0..shards).map(|_| ShardLock::default()).collect(),
                hasher: self.inner.hasher.clone(),
                in_flight: SlotCounts::new(self.inner.hasher.clone()),
                clock: self.inner.clock.clone(),
                max_keys_per_shard: Some(max.div_ceil(shards).max(1)),
                overrides: Overrides::default(),
            }),
        }
    }

    /// How many keys are tracked now, expired ones not yet swept included.
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| lock(s).len()).sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides without going through a future: the memory store never waits.
    pub fn check_now(&self, key: &str, policy: &Policy, cost: u32) -> Decision {
        // Hashed before the clock is read: fewer values are then kept across the clock's call.
        let (hash, shard) = self.locate(key);
        let now = self.inner.clock.now();
        let mut shard = lock(shard);
        let hasher = &self.inner.hasher;
        shard.count_decision(now, hasher);
        self.make_room_for(&mut shard, policy, key, hash, now);
        (shard.table(policy)).check(key, hash, policy, now, u64::from(cost), hasher)
    }

    /// The decision [`check_now`](Self::check_now) would make now, made on a copy of the
    /// key's state: nothing is consumed or stored (see [`Store::peek`]).
    pub(crate) fn peek_now(&self, key: &str, policy: &Policy, cost: u32) -> Decision {
        let now = self.inner.clock.now();
        let (p, cost) = (policy.params(), u64::from(cost));
        let (hash, shard) = self.locate(key);
        let found = lock(shard).find(policy).map(|table| {
            let until = table.live_block(key, hash, now);
            (until, table.live_state(key, hash, p, now))
        });
        match found {
            Some((Some(until), _)) => algorithm::blocked(p, now, until, cost),
            // Cost 0: a look, denied only past the limit (see `State::look`).
            Some((None, Some(state))) if cost == 0 => state.look(p, now),
            Some((None, Some(mut state))) => state.check(p, now, cost),
            _ if cost == 0 => State::new(policy.algorithm()).look(p, now),
            _ => State::new(policy.algorithm()).check(p, now, cost),
        }
    }

    /// Forgets `key`'s state under `policy`, and any block.
    fn reset_now(&self, key: &str, policy: &Policy) {
        let (hash, shard) = self.locate(key);
        if let Some(table) = lock(shard).find_mut(policy) {
            table.remove(key, hash, &self.inner.hasher);
        }
    }

    /// Blocks `key` under `policy` for `duration_us` from now (0: a reset).
    fn block_now(&self, key: &str, policy: &Policy, duration_us: u64) {
        if duration_us == 0 {
            return self.reset_now(key, policy);
        }
        let now = self.inner.clock.now();
        let (hash, shard) = self.locate(key);
        let mut shard = lock(shard);
        self.make_room_for(&mut shard, policy, key, hash, now);
        let until = now.saturating_add(duration_us);
        (shard.table(policy)).block(key, hash, until, &self.inner.hasher);
    }

    /// Gives `n` units back to `key` under `policy` (see `StoreExt::refund`).
    fn refund_now(&self, key: &str, policy: &Policy, n: u32) {
        let now = self.inner.clock.now();
        let (hash, shard) = self.locate(key);
        if let Some(table) = lock(shard).find_mut(policy) {
            let p = policy.params();
            table.update(key, hash, p, now, |state| {
                state.refund(p, now, u64::from(n))
            });
        }
    }

    /// Makes room for `key` in a full shard that does not hold it yet (when `max_keys` is
    /// set).
    fn make_room_for(&self, shard: &mut Shard, policy: &Policy, key: &str, hash: u64, now: u64) {
        if let Some(max) = self.inner.max_keys_per_shard {
            shard.make_room_for(max, policy, key, hash, now, &self.inner.hasher);
        }
    }

    /// The hash of `key` and the shard that holds it.
    fn locate(&self, key: &str) -> (u64, &ShardLock) {
        let hash = self.inner.hasher.hash(key.as_bytes());
        (hash, &self.inner.shards[self.shard_index(hash)])
    }

    /// The shard of a key by its hash: from the hash's upper half, since a table's own cells
    /// are picked by its lowest bits. The shards are a power of two: a mask, not a division.
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.inner.shards.len() - 1)
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

    #[inline]
    fn check_many_ready(&self, checks: &[Check<'_>]) -> Option<Vec<Decision>> {
        Some(self.check_many_now(checks))
    }

    fn clock(&self) -> Option<&dyn Clock> {
        Some(self.inner.clock.as_dyn())
    }

    /// Always: the memory store decides at once.
    #[inline]
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        Some(self.check_now(key, policy, cost))
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.refund_now(key, policy, n);
        Ok(())
    }

    /// Nothing to drop: no call waits.
    fn abandoned(&self) {}

    fn label(&self) -> Arc<str> {
        crate::telemetry::store_label::<Self>()
    }
}

/// In this process: the instance that decides on the store is the only one to see them.
impl QuotaOverrides for MemoryStore {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        Ok(self.inner.overrides.get(rule, key, self.inner.clock.now()))
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let now = self.inner.clock.now();
        let until =
            ttl.map(|ttl| now.saturating_add(u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX)));
        self.inner.overrides.set(rule, key, quota, until, now);
        Ok(())
    }
}

impl Leasing for MemoryStore {
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

/// Slots counted in this process: exact without ids or leases (see `in_flight`).
impl InFlightSlots for MemoryStore {
    async fn take_slot(&self, key: &str, limit: &InFlight, _: u64) -> Result<Decision, StoreError> {
        Ok(self.take_slot_now(key, limit))
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, _: u64) -> Result<(), StoreError> {
        self.inner.in_flight.give_back(key, limit);
        Ok(())
    }

    /// Always: the count is in this process.
    fn give_back_slot_now(&self, key: &str, limit: &InFlight, _: u64) -> bool {
        self.inner.in_flight.give_back(key, limit);
        true
    }

    /// Nothing to renew: the slots live with the process.
    async fn renew_slots(&self, _: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        Ok(())
    }
}

impl MemoryStore {
    /// Takes a slot of `key` under `limit` at once (see `InFlightSlots::take_slot`).
    pub(crate) fn take_slot_now(&self, key: &str, limit: &InFlight) -> Decision {
        self.inner.in_flight.take(key, limit)
    }

    /// How many slots of `key` under `limit` are held.
    #[cfg(test)]
    pub(crate) fn slots_held(&self, key: &str, limit: &InFlight) -> u32 {
        self.inner.in_flight.held(key, limit)
    }
}

#[cfg(test)]
mod tests;
