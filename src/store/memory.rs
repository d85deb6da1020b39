//! The in-memory store: zero setup, one process.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

use crate::algorithm::State;
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::Store;

/// Keeps rate-limit state in this process, in independently locked shards.
///
/// Each decision locks one shard for a few hundred nanoseconds; there is no global lock.
/// Expired state is swept as the store is used (a shard is swept once it has seen as many
/// decisions as it holds keys), so memory follows the keys that are live, not every key ever
/// seen. [`max_keys`](Self::max_keys) caps it outright.
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

#[derive(Default)]
struct Shard {
    entries: HashMap<String, Tracked>,
    /// Decisions since this shard was last swept.
    since_sweep: usize,
}

struct Tracked {
    state: State,
    expires_at: u64,
}

/// A shard is swept after at least this many decisions, however few keys it holds.
const MIN_SWEEP_INTERVAL: usize = 64;

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
                hasher: RandomState::new(),
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
        let mut map_key = String::with_capacity(policy.name().len() + 1 + key.len());
        map_key.push_str(policy.name());
        map_key.push('\0');
        map_key.push_str(key);
        let shard_index = self.inner.hasher.hash_one(&map_key) as usize % self.inner.shards.len();
        let mut shard = lock(&self.inner.shards[shard_index]);
        shard.since_sweep += 1;
        if shard.since_sweep >= shard.entries.len().max(MIN_SWEEP_INTERVAL) {
            shard.entries.retain(|_, t| t.expires_at > now);
            shard.since_sweep = 0;
        }
        let full = self
            .inner
            .max_keys_per_shard
            .is_some_and(|max| shard.entries.len() >= max);
        if full && !shard.entries.contains_key(&map_key) {
            make_room(&mut shard, now);
        }
        match shard.entries.entry(map_key) {
            Entry::Occupied(mut occupied) => {
                let tracked = occupied.get_mut();
                if tracked.expires_at <= now || !tracked.state.is(policy.algorithm()) {
                    tracked.state = State::new(policy.algorithm());
                }
                let decision = tracked.state.check(params, now, u64::from(cost));
                tracked.expires_at = tracked.state.expires_at(params);
                decision
            }
            Entry::Vacant(vacant) => {
                let mut state = State::new(policy.algorithm());
                let decision = state.check(params, now, u64::from(cost));
                if decision.allowed {
                    let expires_at = state.expires_at(params);
                    vacant.insert(Tracked { state, expires_at });
                }
                decision
            }
        }
    }
}

/// Sweeps a full shard; if nothing had expired, forgets one key.
fn make_room(shard: &mut Shard, now: u64) {
    let before = shard.entries.len();
    shard.entries.retain(|_, t| t.expires_at > now);
    shard.since_sweep = 0;
    if shard.entries.len() == before {
        if let Some(victim) = shard.entries.keys().next().cloned() {
            shard.entries.remove(&victim);
        }
    }
}

/// A panic while a shard was locked cannot leave it inconsistent (every update is one
/// assignment), so a poisoned lock is used as is.
fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
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

    fn is_local(&self) -> bool {
        true
    }
}
