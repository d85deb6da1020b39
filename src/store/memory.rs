//! The in-memory store: zero setup, one process.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use foldhash::quality::RandomState;
use hashbrown::HashTable;

use crate::algorithm::{Algorithm, Params, State};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::{Check, Store};

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
    /// foldhash, seeded at random per store: fast on short keys, and clients, who choose
    /// their keys, cannot aim them at one bucket.
    hasher: RandomState,
    clock: Arc<dyn Clock>,
    max_keys_per_shard: Option<usize>,
}

struct Shard {
    /// Each tracked key once, found by its hash and [`Tracked::is`]: a request looks its key up
    /// without building a map key.
    entries: HashTable<Tracked>,
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
            entries: HashTable::new(),
            since_sweep: 0,
            kept_by_sweep: 0,
            sweep_by: u64::MAX,
        }
    }
}

struct Tracked {
    /// The policy's name, a NUL (never in a name), and the client key.
    id: Box<str>,
    /// The hash of `(policy name, client key)` (see [`MemoryStore::locate`]), kept so that a
    /// growing table never hashes a key again.
    hash: u64,
    state: State,
    expires_at: u64,
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
        let algorithm = policy.algorithm();
        let (hash, shard_index) = self.locate(key, policy);
        let mut shard = lock(&self.inner.shards[shard_index]);
        count_decision(&mut shard, now);
        self.make_room_for(&mut shard, hash, (policy.name(), key), now);
        let found = shard.entries.find_mut(hash, |t| t.is(policy.name(), key));
        if let Some(tracked) = found {
            if !tracked.is_live(algorithm, now) {
                tracked.state = State::new(algorithm);
            }
            let decision = tracked.state.check(params, now, u64::from(cost));
            tracked.expires_at = tracked.state.expires_at(params);
            return decision;
        }
        let mut state = State::new(algorithm);
        let decision = state.check(params, now, u64::from(cost));
        if decision.allowed {
            let tracked = Tracked::new(hash, (policy.name(), key), state, params);
            shard.entries.insert_unique(hash, tracked, |t| t.hash);
        }
        decision
    }

    /// Decides one request against several limits at once, atomically: see
    /// [`Store::check_many`]. The clock is read once, so every check sees the same instant.
    ///
    /// Every shard involved is locked for the whole decision (each once, in ascending order,
    /// so two stacked decisions can never deadlock), each check is decided on a copy of its
    /// state, and the copies are stored only when no blocking check was denied. Two checks on
    /// the same policy and key are decided one after the other, as two calls to
    /// [`check_now`](Self::check_now) would be: the second sees what the first consumed.
    pub fn check_many_now(&self, checks: &[Check<'_>]) -> Vec<Decision> {
        if let [one] = checks {
            return vec![self.check_now(one.key, one.policy, one.cost)];
        }
        let now = self.inner.clock.now();
        let located: Vec<(u64, usize)> = checks
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
        for (shard_index, shard) in &mut guards {
            for (i, (check, &(hash, _))) in checks
                .iter()
                .zip(&located)
                .enumerate()
                .filter(|(_, (_, (_, s)))| s == shard_index)
            {
                count_decision(shard, now);
                let algorithm = check.policy.algorithm();
                let id = (check.policy.name(), check.key);
                let slot = match pending.iter().position(|p| p.hash == hash && p.id == id) {
                    Some(slot) => slot,
                    None => {
                        let tracked = shard.entries.find(hash, |t| t.is(id.0, id.1));
                        pending.push(Pending {
                            id,
                            hash,
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
        let decisions: Vec<Decision> = decisions.into_iter().flatten().collect();

        let blocked = checks
            .iter()
            .zip(&decisions)
            .any(|(c, d)| c.blocking && !d.allowed);
        if blocked {
            return decisions;
        }
        // Stored as check_now stores: a tracked key always (its state may have been renewed
        // after expiry), a new key only once allowed.
        pending.retain(|p| p.tracked || p.allowed);
        for p in &pending {
            if let Some((_, shard)) = guards.iter_mut().find(|(i, _)| *i == p.shard) {
                self.make_room_for(shard, p.hash, p.id, now);
            }
        }
        for p in pending {
            if let Some((_, shard)) = guards.iter_mut().find(|(i, _)| *i == p.shard) {
                let expires_at = p.state.expires_at(p.params);
                match shard.entries.find_mut(p.hash, |t| t.is(p.id.0, p.id.1)) {
                    Some(tracked) => {
                        tracked.state = p.state;
                        tracked.expires_at = expires_at;
                    }
                    None => {
                        let tracked = Tracked::new(p.hash, p.id, p.state, p.params);
                        shard.entries.insert_unique(p.hash, tracked, |t| t.hash);
                    }
                }
            }
        }
        decisions
    }

    /// Makes room for the key `id` (policy name, client key) in a full shard that does not
    /// hold it yet (when `max_keys` is set).
    fn make_room_for(&self, shard: &mut Shard, hash: u64, id: (&str, &str), now: u64) {
        let full = self
            .inner
            .max_keys_per_shard
            .is_some_and(|max| shard.entries.len() >= max);
        if full && shard.entries.find(hash, |t| t.is(id.0, id.1)).is_none() {
            make_room(shard, now);
        }
    }

    /// The hash of `key` under `policy`, and the index of the shard that holds it. The one
    /// hash serves both: the shard is picked by bits 32 and up, while a shard's table uses the
    /// low bits (and the top 7), so keys of one shard still spread over its whole table.
    fn locate(&self, key: &str, policy: &Policy) -> (u64, usize) {
        let hash = self.inner.hasher.hash_one((policy.name(), key));
        let shard_index = (hash >> 32) as usize % self.inner.shards.len();
        (hash, shard_index)
    }
}

/// A state to store if the stacked decision is not blocked.
struct Pending<'a> {
    /// Policy name and client key.
    id: (&'a str, &'a str),
    hash: u64,
    shard: usize,
    state: State,
    params: &'a Params,
    /// Whether the key was tracked when the decision began.
    tracked: bool,
    /// Whether any check of this key was allowed.
    allowed: bool,
}

impl Tracked {
    fn new(hash: u64, id: (&str, &str), state: State, params: &Params) -> Self {
        let (name, key) = id;
        let mut joined = String::with_capacity(name.len() + 1 + key.len());
        joined.push_str(name);
        joined.push('\0');
        joined.push_str(key);
        let expires_at = state.expires_at(params);
        Self {
            id: joined.into_boxed_str(),
            hash,
            state,
            expires_at,
        }
    }

    /// Whether this is the state of `key` under the policy named `name`.
    fn is(&self, name: &str, key: &str) -> bool {
        let rest = self
            .id
            .strip_prefix(name)
            .and_then(|r| r.strip_prefix('\0'));
        rest == Some(key)
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
    shard.entries.retain(|t| {
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
fn shrink_if_roomy(entries: &mut HashTable<Tracked>) {
    let room = entries.capacity();
    if room > MIN_SHRINK_CAPACITY && room > SHRINK_WHEN_ROOM_PER_KEY * entries.len() {
        entries.shrink_to(2 * entries.len(), |t| t.hash);
    }
}

/// Sweeps a full shard; if nothing had expired, forgets one key.
fn make_room(shard: &mut Shard, now: u64) {
    let before = shard.entries.len();
    sweep(shard, now);
    if shard.entries.len() == before {
        if let Some(victim) = shard.entries.iter().next().map(|t| t.hash) {
            if let Ok(entry) = shard.entries.find_entry(victim, |t| t.hash == victim) {
                entry.remove();
            }
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

    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        Ok(self.check_many_now(checks))
    }

    fn clock(&self) -> Option<&dyn Clock> {
        Some(&*self.inner.clock)
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
        Policy::new(name, Quota::per_minute(limit), algorithm).unwrap()
    }

    #[test]
    fn memory_follows_live_keys_not_every_key_ever_seen() {
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        // Each key's state lasts 100 ms; a new key every 10 µs: about 10,000 live at a time.
        let policy = Policy::new("p", Quota::per_second(10), Algorithm::Gcra).unwrap();
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
        let hasher = RandomState::default();
        let mut entries = HashTable::new();
        let add = |entries: &mut HashTable<Tracked>, key: &str| {
            let hash = hasher.hash_one(("p", key));
            let state = State::new(Algorithm::Gcra);
            let mut tracked = Tracked::new(
                hash,
                ("p", key),
                state,
                &policy("p", 1, Algorithm::Gcra).params().clone(),
            );
            tracked.expires_at = u64::MAX;
            entries.insert_unique(hash, tracked, |t| t.hash);
        };
        for i in 0..10_000 {
            add(&mut entries, &i.to_string());
        }
        let full = entries.capacity();
        entries.retain(|t| t.id["p\0".len()..].parse::<usize>().unwrap() < 1_000);
        shrink_if_roomy(&mut entries);
        let shrunk = entries.capacity();
        assert!(
            (2_000..full / 2).contains(&shrunk),
            "room for {shrunk} keys, was {full}"
        );
        // No thrash: the same keys again change nothing, and twice as many fit without growing.
        shrink_if_roomy(&mut entries);
        assert_eq!(entries.capacity(), shrunk);
        for i in 0..1_000 {
            add(&mut entries, &format!("new-{i}"));
        }
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
