//! The in-memory store: zero setup, one process.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use foldhash::quality::RandomState;

use crate::algorithm::{self, Algorithm, Params, State};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::stack::{Check, Grant, StoreExt};
use crate::store::Store;

/// A shard's keys. foldhash, seeded at random per store: faster than SipHash, and client
/// keys (chosen by clients) cannot aim at its buckets.
type Table = HashMap<String, Tracked, RandomState>;

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

struct Shard {
    entries: Table,
    /// Decisions since this shard was last swept.
    since_sweep: usize,
    /// Keys left by the last sweep: the next sweep comes after as many decisions.
    kept_by_sweep: usize,
    /// Or at this time (µs), when every key the last sweep kept has expired, so that a shard
    /// that held a flood is emptied soon after the flood's keys expire, not only after as many
    /// decisions again. `u64::MAX` when the last sweep kept nothing.
    sweep_by: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Self {
            entries: Table::default(),
            since_sweep: 0,
            kept_by_sweep: 0,
            sweep_by: u64::MAX,
        }
    }
}

struct Tracked {
    state: State,
    expires_at: u64,
    /// Until when (µs) the client is blocked, if it is: the state is then a new one, for the
    /// client to start afresh when the block ends (`expires_at` is the same time).
    blocked_until: Option<u64>,
}

/// A shard is swept after at least this many decisions, however few keys it holds.
const MIN_SWEEP_INTERVAL: usize = 64;
/// A shard is swept for the time at most this often (µs): a key the last sweep kept may have
/// been renewed since, and then the sweep frees nothing.
const MIN_SWEEP_GAP_US: u64 = 1_000_000;
/// A table with more than this many times as much room as keys is shrunk, to twice its keys.
/// In between (a table shrinks below a quarter full and grows when full) it never thrashes.
const SHRINK_WHEN_ROOM_PER_KEY: usize = 4;
/// Tables with room for fewer keys are left as they are: too small to matter.
const MIN_SHRINK_CAPACITY: usize = 1_024;

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

    /// Decides one request against several limits at once, atomically: see
    /// `StoreExt::check_many`. The clock is read once, so every check sees the same instant.
    ///
    /// Every shard involved is locked for the whole decision (each once, in ascending order,
    /// so two stacked decisions can never deadlock), each check is decided on a copy of its
    /// state, and the copies are stored only when no blocking check was denied. Two checks on
    /// the same policy and key are decided one after the other, as two calls to
    /// [`check_now`](Self::check_now) would be: the second sees what the first consumed.
    pub(crate) fn check_many_now(&self, checks: &[Check<'_>]) -> Vec<Decision> {
        if let [one] = checks {
            return vec![self.check_now(one.key, one.policy, one.cost)];
        }
        let now = self.inner.clock.now();
        let located: Vec<(String, usize)> = checks
            .iter()
            .map(|c| self.locate(c.key, c.policy))
            .collect();
        let mut order: Vec<usize> = located.iter().map(|&(_, shard)| shard).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> = order
            .into_iter()
            .filter_map(|i| self.inner.shards.get(i).map(|shard| (i, lock(shard))))
            .collect();

        // Decide, shard by shard; within a shard in the checks' order, so that repeated
        // checks of one key see each other.
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut pending: Vec<Pending<'_>> = Vec::with_capacity(checks.len());
        // Which checks were denied by a block already in place.
        let mut by_block = vec![false; checks.len()];
        for (shard_index, shard) in &mut guards {
            for (i, (check, (map_key, _))) in checks
                .iter()
                .zip(&located)
                .enumerate()
                .filter(|(_, (_, (_, s)))| s == shard_index)
            {
                count_decision(shard, now);
                let algorithm = check.policy.algorithm();
                let until = shard
                    .entries
                    .get(map_key.as_str())
                    .and_then(|t| t.live_block(algorithm, now));
                if let Some(until) = until {
                    by_block[i] = true;
                    let decision = algorithm::blocked(
                        check.policy.params(),
                        now,
                        until,
                        u64::from(check.cost),
                    );
                    if let Some(d) = decisions.get_mut(i) {
                        *d = Some(decision);
                    }
                    continue;
                }
                let slot = match pending.iter().position(|p| p.map_key == map_key.as_str()) {
                    Some(slot) => slot,
                    None => {
                        let tracked = shard.entries.get(map_key.as_str());
                        pending.push(Pending {
                            map_key,
                            shard: *shard_index,
                            state: tracked
                                .filter(|t| t.is_live(algorithm, now))
                                .map_or_else(|| State::new(algorithm), |t| t.state.clone()),
                            params: check.policy.params(),
                            tracked: tracked.is_some(),
                            allowed: false,
                        });
                        pending.len() - 1
                    }
                };
                let Some(p) = pending.get_mut(slot) else {
                    continue;
                };
                if !p.state.is(algorithm) {
                    // The same name under another algorithm: a key with no history.
                    p.state = State::new(algorithm);
                }
                p.params = check.policy.params();
                let decision = p.state.check(p.params, now, u64::from(check.cost));
                p.allowed |= decision.allowed;
                if let Some(d) = decisions.get_mut(i) {
                    *d = Some(decision);
                }
            }
        }
        let mut decisions: Vec<Decision> = decisions.into_iter().flatten().collect();

        let blocked = checks
            .iter()
            .zip(&decisions)
            .any(|(c, d)| c.blocking && !d.allowed);
        if blocked {
            // Only what this decision denied starts a block: blocking checks of a policy
            // with `block_for`, on keys not blocked already.
            for (i, check) in checks.iter().enumerate() {
                let (Some(decision), Some((map_key, shard_index))) =
                    (decisions.get_mut(i), located.get(i))
                else {
                    continue;
                };
                let until = block_after(decision, check.policy, now);
                let (Some(until), true, false) = (until, check.blocking, by_block[i]) else {
                    continue;
                };
                if let Some((_, shard)) = guards.iter_mut().find(|(s, _)| s == shard_index) {
                    self.make_room_for(shard, map_key, now);
                    let tracked = Tracked::blocked(check.policy.algorithm(), until);
                    shard.entries.insert(map_key.clone(), tracked);
                }
                *decision =
                    algorithm::blocked(check.policy.params(), now, until, u64::from(check.cost));
            }
            return decisions;
        }
        // Stored as check_now stores: a tracked key always (its state may have been renewed
        // after expiry), a new key only once allowed.
        pending.retain(|p| p.tracked || p.allowed);
        for p in &pending {
            if let Some((_, shard)) = guards.iter_mut().find(|(i, _)| *i == p.shard) {
                self.make_room_for(shard, p.map_key, now);
            }
        }
        for p in pending {
            if let Some((_, shard)) = guards.iter_mut().find(|(i, _)| *i == p.shard) {
                let expires_at = p.state.expires_at(p.params);
                let tracked = Tracked {
                    state: p.state,
                    expires_at,
                    blocked_until: None,
                };
                shard.entries.insert(p.map_key.to_owned(), tracked);
            }
        }
        decisions
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

/// A state to store if the stacked decision is not blocked.
struct Pending<'a> {
    map_key: &'a str,
    shard: usize,
    state: State,
    params: &'a Params,
    /// Whether the key was tracked when the decision began.
    tracked: bool,
    /// Whether any check of this key was allowed.
    allowed: bool,
}

/// When a decision starts a block under `policy` (one with `block_for`, denying what a wait
/// could allow): until when.
fn block_after(decision: &Decision, policy: &Policy, now: u64) -> Option<u64> {
    let block_for = policy.block_for_us();
    let starts = !decision.allowed && block_for > 0 && decision.retry_after.is_some();
    starts.then(|| now.saturating_add(block_for))
}

impl Tracked {
    /// A client blocked until `until`, with a new state for after the block.
    fn blocked(algorithm: Algorithm, until: u64) -> Self {
        Self {
            state: State::new(algorithm),
            expires_at: until,
            blocked_until: Some(until),
        }
    }

    /// Until when the client is blocked under `algorithm` at `now`, if it is. A block of
    /// another algorithm's state does not count (on Redis it is another key).
    fn live_block(&self, algorithm: Algorithm, now: u64) -> Option<u64> {
        self.blocked_until
            .filter(|&until| until > now && self.state.is(algorithm))
    }

    /// Whether this state still decides for `algorithm` at `now`. Expired state decides like
    /// no history, and state of another algorithm (a policy changed on reload) means nothing.
    fn is_live(&self, algorithm: Algorithm, now: u64) -> bool {
        self.expires_at > now && self.state.is(algorithm)
    }
}

/// Counts one decision in `shard` and sweeps expired state once the shard has seen as many
/// decisions as its last sweep kept keys, or once all those keys have expired. A sweep costs
/// O(keys), so this is O(1) per decision (a sweep for the time frees every key it visits, bar
/// renewed ones, at most once a second), and the shard holds at most its live keys plus one
/// sweep interval of new ones.
fn count_decision(shard: &mut Shard, now: u64) {
    shard.since_sweep += 1;
    if shard.since_sweep >= shard.kept_by_sweep.max(MIN_SWEEP_INTERVAL) || now >= shard.sweep_by {
        sweep(shard, now);
    }
}

fn sweep(shard: &mut Shard, now: u64) {
    let mut last_expiry = None;
    shard.entries.retain(|_, t| {
        let live = t.expires_at > now;
        if live {
            last_expiry = last_expiry.max(Some(t.expires_at));
        }
        live
    });
    shard.since_sweep = 0;
    shard.kept_by_sweep = shard.entries.len();
    shard.sweep_by = last_expiry.map_or(u64::MAX, |last| {
        last.max(now.saturating_add(MIN_SWEEP_GAP_US))
    });
    shrink_if_roomy(&mut shard.entries);
}

/// Gives back a table's room once it holds far fewer keys than it has room for (a flood of
/// random keys has come and gone): `retain` alone keeps the table at its peak size.
fn shrink_if_roomy(entries: &mut Table) {
    let room = entries.capacity();
    if room > MIN_SHRINK_CAPACITY && room > SHRINK_WHEN_ROOM_PER_KEY * entries.len() {
        entries.shrink_to(2 * entries.len());
    }
}

/// Sweeps a full shard; if nothing had expired, forgets one key.
fn make_room(shard: &mut Shard, now: u64) {
    let before = shard.entries.len();
    sweep(shard, now);
    if shard.entries.len() == before {
        if let Some(victim) = shard.entries.keys().next().cloned() {
            shard.entries.remove(&victim);
        }
    }
}

/// A panic while a shard was locked cannot leave it inconsistent (every update is one
/// assignment), so a poisoned lock is used as is.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
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

#[cfg(test)]
mod tests {
    use std::sync::Barrier;
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::quota::Quota;

    fn policy(name: &str, limit: u32, algorithm: Algorithm) -> Policy {
        Policy::new(name, Quota::per_minute(limit).unwrap(), algorithm).unwrap()
    }

    #[test]
    fn memory_follows_live_keys_not_every_key_ever_seen() {
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        // Each key's state lasts 100 ms; a new key every 10 µs: about 10,000 live at a time.
        let policy = Policy::new("p", Quota::per_second(10).unwrap(), Algorithm::Gcra).unwrap();
        let mut most = 0;
        for i in 0..300_000 {
            clock.advance(Duration::from_micros(10));
            assert!(store.check_now(&i.to_string(), &policy, 1).allowed);
            most = most.max(store.len());
        }
        // Sweeping lags at most one shard's worth of decisions behind: about twice the live set.
        assert!(most < 25_000, "{most} keys tracked at once");
        clock.advance(Duration::from_secs(1));
        for i in 0..20_000 {
            store.check_now(&format!("again-{i}"), &policy, 1);
        }
        assert!(
            store.len() < 25_000,
            "{} keys after everything expired",
            store.len()
        );
    }

    #[test]
    fn max_keys_caps_what_is_tracked() {
        let store = MemoryStore::with_clock(ManualClock::new(0)).max_keys(1_000);
        let shards = store.inner.shards.len();
        let policy = policy("p", 10, Algorithm::Gcra);
        for i in 0..10_000 {
            assert!(store.check_now(&i.to_string(), &policy, 1).allowed);
        }
        assert!(store.len() <= 1_000 + shards, "{} tracked", store.len());
        // A tracked key keeps its state while others come and go in other shards.
        let hot = policy.clone();
        for _ in 0..10 {
            store.check_now("hot", &hot, 1);
        }
        assert!(!store.check_now("hot", &hot, 1).allowed);
    }

    #[test]
    fn a_rounded_up_interval_makes_a_second_burst_one_period_later_wait_2_us() {
        // 3/s: T = ceil(1 s / 3) = 333,334 µs, so a full bucket of 3 refills in 1,000,002 µs,
        // 2 µs later than the exact rate. README states these figures.
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
        ] {
            let clock = ManualClock::new(1_000_000_000);
            let store = MemoryStore::with_clock(clock.clone());
            let p = Policy::new("p", "3/s".parse().unwrap(), algorithm).unwrap();
            for _ in 0..3 {
                assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
            }
            assert!(!store.check_now("k", &p, 1).allowed, "{algorithm}");
            // One period after the burst, a second burst of 3 loses its last request by 2 µs.
            clock.advance(Duration::from_secs(1));
            assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
            assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
            let third = store.check_now("k", &p, 1);
            assert!(!third.allowed, "{algorithm}");
            assert_eq!(
                third.retry_after,
                Some(Duration::from_micros(2)),
                "{algorithm}"
            );
            clock.advance(Duration::from_micros(1));
            assert!(!store.check_now("k", &p, 1).allowed, "{algorithm}");
            clock.advance(Duration::from_micros(1));
            assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
        }
    }

    /// Room in every shard's table, in keys.
    fn capacity(store: &MemoryStore) -> usize {
        store
            .inner
            .shards
            .iter()
            .map(|s| lock(s).entries.capacity())
            .sum()
    }

    #[test]
    fn a_flood_of_keys_gives_its_room_back_once_expired() {
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new("p", "5/10s".parse().unwrap(), Algorithm::Gcra).unwrap();
        for i in 0..200_000 {
            assert!(store.check_now(&format!("flood-{i}"), &policy, 1).allowed);
        }
        let peak = capacity(&store);
        assert!(peak >= 200_000, "room for {peak} keys");

        // Every flood key has expired (5/10s keeps at most 10 s of state). One decision per
        // shard is far fewer than the keys each holds, yet sweeps it: every key its last sweep
        // kept has expired.
        clock.advance(Duration::from_secs(10));
        let now = store.inner.clock.now();
        for shard in store.inner.shards.iter() {
            count_decision(&mut lock(shard), now);
        }
        assert_eq!(store.len(), 0);
        let after = capacity(&store);
        assert!(
            after <= store.inner.shards.len() * MIN_SHRINK_CAPACITY,
            "room for {after} keys after the flood (peak {peak})"
        );
    }

    #[test]
    fn a_roomy_table_shrinks_to_twice_its_keys_and_then_holds_its_size() {
        let tracked = || Tracked {
            state: State::new(Algorithm::Gcra),
            expires_at: u64::MAX,
            blocked_until: None,
        };
        let mut entries: Table = (0..10_000).map(|i| (i.to_string(), tracked())).collect();
        let full = entries.capacity();
        entries.retain(|k, _| k.parse::<usize>().unwrap() < 1_000);
        shrink_if_roomy(&mut entries);
        let shrunk = entries.capacity();
        assert!(
            (2_000..full / 2).contains(&shrunk),
            "room for {shrunk} keys, was {full}"
        );
        // No thrash: the same keys again change nothing, and twice as many fit without growing.
        shrink_if_roomy(&mut entries);
        assert_eq!(entries.capacity(), shrunk);
        entries.extend((0..1_000).map(|i| (format!("new-{i}"), tracked())));
        assert_eq!(entries.capacity(), shrunk);
    }

    fn check<'a>(key: &'a str, policy: &'a Policy, blocking: bool) -> Check<'a> {
        Check {
            key,
            policy,
            cost: 1,
            blocking,
        }
    }

    #[test]
    fn many_keys_sharing_shards_lock_each_shard_once() {
        let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
        let p = policy("p", 1, Algorithm::FixedWindow);
        // More keys than shards: some shards hold several of them. Locking one twice would
        // deadlock (or panic) rather than return.
        let keys: Vec<String> = (0..2 * store.inner.shards.len() + 1)
            .map(|i| format!("k{i}"))
            .collect();
        let checks: Vec<Check<'_>> = keys.iter().map(|k| check(k, &p, true)).collect();
        let first = store.check_many_now(&checks);
        assert!(first.iter().all(|d| d.allowed && d.remaining == 0));
        assert_eq!(store.len(), keys.len());
        // Now every key is spent: all denied, and nothing more is tracked.
        assert!(store.check_many_now(&checks).iter().all(|d| !d.allowed));
        assert_eq!(store.len(), keys.len());
    }

    #[test]
    fn opposite_orders_on_many_threads_do_not_deadlock() {
        let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
        let p = policy("p", 100_000, Algorithm::Gcra);
        let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let forward: Vec<Check<'_>> = keys.iter().map(|k| check(k, &p, true)).collect();
        let backward: Vec<Check<'_>> = forward.iter().rev().copied().collect();
        let barrier = Barrier::new(8);
        std::thread::scope(|s| {
            for t in 0..8 {
                let checks = if t % 2 == 0 { &forward } else { &backward };
                let (store, barrier) = (&store, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    for _ in 0..200 {
                        store.check_many_now(checks);
                    }
                });
            }
        });
        // 8 × 200 requests, each consumed once from every key.
        let d = store.check_now("k0", &p, 1);
        assert_eq!(d.remaining, 100_000 - 1_601);
    }

    #[test]
    fn a_repeated_check_sees_the_first_and_a_blocked_one_consumes_nothing() {
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        let p = policy("p", 3, Algorithm::SlidingWindowLog);
        let twice = [check("k", &p, true), check("k", &p, true)];
        let remaining = |ds: Vec<Decision>| -> Vec<(bool, u64)> {
            ds.iter().map(|d| (d.allowed, d.remaining)).collect()
        };
        // As two single checks would decide: the second sees the first.
        assert_eq!(
            remaining(store.check_many_now(&twice)),
            [(true, 2), (true, 1)]
        );
        // One left: the first takes it, the second is denied, so nothing is consumed.
        assert_eq!(
            remaining(store.check_many_now(&twice)),
            [(true, 0), (false, 0)]
        );
        assert_eq!(remaining(vec![store.check_now("k", &p, 1)]), [(true, 0)]);
        // Once the window has passed, the key is whole again.
        clock.advance(Duration::from_secs(60));
        assert_eq!(
            remaining(store.check_many_now(&twice)),
            [(true, 2), (true, 1)]
        );
    }

    #[test]
    fn a_peek_decides_as_a_check_would_and_consumes_nothing() {
        for algorithm in Algorithm::ALL {
            let clock = ManualClock::new(1_000_000);
            let store = MemoryStore::with_clock(clock.clone());
            let p = policy("p", 3, algorithm);
            assert_eq!(store.peek_now("k", &p, 1), store.check_now("k", &p, 1));
            // Peeking again and again changes nothing: the next check sees one used.
            for _ in 0..5 {
                let peek = store.peek_now("k", &p, 2);
                assert!(peek.allowed && peek.remaining == 0, "{algorithm}: {peek:?}");
            }
            assert!(store.check_now("k", &p, 2).allowed, "{algorithm}");
            let denied = store.peek_now("k", &p, 1);
            assert_eq!(denied, store.check_now("k", &p, 1), "{algorithm}");
            assert!(!denied.allowed, "{algorithm}");
        }
        // A key never seen is not tracked by a peek.
        let store = MemoryStore::new();
        store.peek_now("new", &policy("p", 3, Algorithm::Gcra), 1);
        assert!(store.is_empty());
    }

    #[test]
    fn a_denied_new_key_is_not_tracked_and_a_blocked_request_stores_nothing() {
        let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
        let small = policy("small", 1, Algorithm::TokenBucket);
        let big = policy("big", 10, Algorithm::Gcra);
        let heavy = Check {
            key: "k",
            policy: &small,
            cost: 2,
            blocking: true,
        };
        let ds = store.check_many_now(&[check("k", &big, true), heavy]);
        assert!(ds[0].allowed && !ds[1].allowed);
        assert!(store.is_empty());
    }
}

#[cfg(test)]
mod lease_tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::quota::Quota;

    #[tokio::test]
    async fn the_design_example_leaves_the_tat_after_what_others_consumed() {
        // T = 100 ms. A lease of 10 at 0, 1 unit from elsewhere at 20T, 5 returned at 20T.
        let clock = ManualClock::new(0);
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new(
            "p",
            Quota::per_second(10).unwrap().burst(20).unwrap(),
            Algorithm::Gcra,
        )
        .unwrap();
        let grant = store.acquire("k", &policy, 1, 10).await.unwrap();
        assert_eq!((grant.granted, grant.mark), (10, 1_000_000));
        assert_eq!(grant.decision.remaining, 10);
        clock.set(2_000_000);
        assert!(store.check("k", &policy, 1).await.unwrap().allowed);
        assert_eq!(store.release("k", &policy, 5, &grant).await.unwrap(), 0);
        // TAT = 21T: the bucket is whole 100 ms later.
        let d = store.check_now("k", &policy, 1);
        assert_eq!(d.reset_after, Duration::from_millis(200));
        assert_eq!(d.remaining, 18);
    }
}
