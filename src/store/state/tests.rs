//! What only the crate calls on a state-backed store of either form (leases, refunds, charged
//! hits), beside the memory store on the same history; the bound on conflicting writes; an
//! atomic backend's one update per decision; state it cannot read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{AtomicStateStore, StateBackedStore, StateStore, Update, Versioned, MAX_ATTEMPTS};
use crate::algorithm::Algorithm;
use crate::clock::ManualClock;
use crate::error::StoreError;
use crate::quota::{Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{Leasing, StoreExt};
use crate::store::{MemoryStore, Store};

/// Bytes and versions in a map, with no expiry (the adapter reads expired state as new).
#[derive(Clone, Default)]
struct Map {
    entries: Arc<Mutex<HashMap<String, Versioned>>>,
    /// Every write is refused, as if another writer always came first.
    always_conflict: bool,
    writes: Arc<AtomicU64>,
}

impl StateStore for Map {
    async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        Ok(self.entries.lock().unwrap().get(key).cloned())
    }

    async fn set(
        &self,
        key: &str,
        bytes: &[u8],
        expected: Option<u64>,
        _ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut entries = self.entries.lock().unwrap();
        let current = entries.get(key).map(|v| v.version);
        if self.always_conflict || current != expected {
            return Ok(false);
        }
        let version = current.unwrap_or(0) + 1;
        entries.insert(key.to_owned(), Versioned::new(bytes.to_vec(), version));
        Ok(true)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.entries.lock().unwrap().remove(key);
        Ok(())
    }
}

/// Bytes in a map behind a lock, updated in place (no expiry: the adapter reads expired
/// state as new).
#[derive(Clone, Default)]
struct AtomicMap {
    entries: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    /// Each update first calls its function this many more times on no state and discards
    /// what it says, as a transaction that failed and was retried.
    retries: u32,
    /// Every update fails, as a backend that does not answer.
    failing: bool,
    updates: Arc<AtomicU64>,
}

impl AtomicStateStore for AtomicMap {
    async fn update(
        &self,
        key: &str,
        mut decide: impl FnMut(Option<&[u8]>) -> Update + Send,
    ) -> Result<(), StoreError> {
        self.updates.fetch_add(1, Ordering::Relaxed);
        if self.failing {
            return Err(StoreError::backend("not answering"));
        }
        for _ in 0..self.retries {
            decide(None);
        }
        let mut entries = self.entries.lock().unwrap();
        match decide(entries.get(key).map(Vec::as_slice)) {
            Update::Keep => {}
            Update::Set { bytes, ttl } => {
                assert!(ttl >= Duration::from_micros(1), "{ttl:?}");
                entries.insert(key.to_owned(), bytes);
            }
        }
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.entries.lock().unwrap().remove(key);
        Ok(())
    }
}

/// Leases taken and given back, refunds, and charged hits (as `rls` sends them): the same
/// answers as the memory store's on one seeded history per algorithm, on a compare-and-set
/// backend and on an atomic one that retries every update once.
#[tokio::test]
async fn leases_refunds_and_charged_hits_agree_with_memory() {
    let atomic = || AtomicMap {
        retries: 1,
        ..AtomicMap::default()
    };
    for (form, algorithm) in ["cas", "atomic"]
        .into_iter()
        .flat_map(|form| Algorithm::ALL.map(|algorithm| (form, algorithm)))
    {
        let clock = ManualClock::new(1_700_000_000_000_000);
        let memory = MemoryStore::with_clock(clock.clone());
        let state = match form {
            "cas" => StateBackedStore::new(Map::default()),
            _ => StateBackedStore::atomic(atomic()),
        }
        .with_clock(clock.clone());
        let policy = Policy::new(
            "p",
            Quota::new(8, Duration::from_secs(2)).unwrap(),
            algorithm,
        )
        .unwrap();
        let mut rng = SmallRng::seed_from_u64(0x1ea5e ^ algorithm as u64);
        let mut granted = Vec::new();
        for step in 0..400 {
            clock.advance(Duration::from_micros(rng.random_range(0..300_000)));
            let key = ["a", "b"][rng.random_range(0..2)];
            let at = format!("{form} {algorithm} step {step} key {key}");
            // What is left agrees before each step, whatever the last one moved.
            let left = memory.peek(key, &policy, 0).await.unwrap();
            assert_eq!(
                left,
                state.peek(key, &policy, 0).await.unwrap(),
                "{at} peek"
            );
            match rng.random_range(0..6) {
                0 => {
                    let (min, max) = (rng.random_range(1..3), rng.random_range(3..6));
                    let m = memory.acquire(key, &policy, min, max).await.unwrap();
                    let s = state.acquire(key, &policy, min, max).await.unwrap();
                    assert_eq!(m, s, "{at} acquire");
                    granted.push((key, m));
                }
                1 if !granted.is_empty() => {
                    let (key, grant) = granted.swap_remove(rng.random_range(0..granted.len()));
                    let unused = rng.random_range(0..=grant.granted);
                    let m = memory.release(key, &policy, unused, &grant).await.unwrap();
                    let s = state.release(key, &policy, unused, &grant).await.unwrap();
                    assert_eq!(m, s, "{at} release");
                }
                2 => {
                    let n = rng.random_range(1..4);
                    memory.refund(key, &policy, n).await.unwrap();
                    state.refund(key, &policy, n).await.unwrap();
                }
                3 => {
                    let cost = rng.random_range(1..5);
                    let checks = [Check::new(key, &policy, cost).charge(true)];
                    let m = memory.check_many(&checks).await.unwrap();
                    let s = state.check_many(&checks).await.unwrap();
                    assert_eq!(m, s, "{at} charged {cost}");
                }
                _ => {
                    let cost = rng.random_range(1..4);
                    let m = memory.check(key, &policy, cost).await.unwrap();
                    let s = state.check(key, &policy, cost).await.unwrap();
                    assert_eq!(m, s, "{at} cost {cost}");
                }
            }
        }
    }
}

#[tokio::test]
async fn a_key_that_keeps_changing_is_given_up_after_the_bound() {
    let map = Map {
        always_conflict: true,
        ..Map::default()
    };
    let store = StateBackedStore::new(map.clone());
    let policy = Policy::new("p", Quota::per_minute(5).unwrap(), Algorithm::Gcra).unwrap();
    match store.check("k", &policy, 1).await {
        Err(StoreError::KeyState(e)) => assert!(e.to_string().contains("changed"), "{e}"),
        other => panic!("expected a KeyState error, got {other:?}"),
    }
    assert_eq!(map.writes.load(Ordering::Relaxed), u64::from(MAX_ATTEMPTS));
    // A denial writes nothing, so it needs no try: a cost above the capacity.
    let denied = store.check("k", &policy, 6).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(map.writes.load(Ordering::Relaxed), u64::from(MAX_ATTEMPTS));
}

/// One update per decision, allowed or denied (a denial keeps the state as it is), and no
/// turn taken, nothing retried: the update is the atomic step.
#[tokio::test]
async fn an_atomic_backend_decides_each_request_in_one_update() {
    let map = AtomicMap::default();
    let store = StateBackedStore::atomic(map.clone());
    let policy = Policy::new("p", Quota::per_minute(2).unwrap(), Algorithm::FixedWindow).unwrap();
    let allowed = [
        store.check("k", &policy, 1).await.unwrap().allowed,
        store.check("k", &policy, 1).await.unwrap().allowed,
    ];
    let written = map
        .entries
        .lock()
        .unwrap()
        .get("tollgate:p:fixed_window:k")
        .cloned();
    let denied = store.check("k", &policy, 1).await.unwrap();
    assert_eq!(allowed, [true, true]);
    assert!(!denied.allowed);
    assert_eq!(map.updates.load(Ordering::Relaxed), 3);
    let after = map
        .entries
        .lock()
        .unwrap()
        .get("tollgate:p:fixed_window:k")
        .cloned();
    assert!(written.is_some());
    assert_eq!(after, written, "a denial wrote");
    // A reset deletes the key; the next request starts a whole window.
    store.reset("k", &policy).await.unwrap();
    assert!(map.entries.lock().unwrap().is_empty());
    assert!(store.check("k", &policy, 2).await.unwrap().allowed);
}

#[tokio::test]
async fn an_atomic_backend_that_fails_is_a_store_error() {
    let map = AtomicMap {
        failing: true,
        ..AtomicMap::default()
    };
    let store = StateBackedStore::atomic(map);
    let policy = Policy::new("p", Quota::per_minute(5).unwrap(), Algorithm::Gcra).unwrap();
    match store.check("k", &policy, 1).await {
        Err(StoreError::Backend(e)) => assert!(e.to_string().contains("not answering"), "{e}"),
        other => panic!("expected a Backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn state_it_cannot_read_is_that_keys_problem_and_is_left_alone() {
    let (cas, atomic) = (Map::default(), AtomicMap::default());
    let policy = Policy::new("p", Quota::per_minute(5).unwrap(), Algorithm::Gcra).unwrap();
    let stores = [
        StateBackedStore::new(cas.clone()),
        StateBackedStore::atomic(atomic.clone()),
    ];
    let key = stores[0].state_key("k", &policy);
    assert_eq!(key, "tollgate:p:gcra:k");
    // A newer format's state.
    let newer = Versioned::new(vec![2, 1, 0, 0, 0, 0, 0, 0, 0, 1], 7);
    cas.entries
        .lock()
        .unwrap()
        .insert(key.clone(), newer.clone());
    atomic
        .entries
        .lock()
        .unwrap()
        .insert(key.clone(), newer.bytes.clone());
    for store in &stores {
        for result in [
            store.check("k", &policy, 1).await,
            store.peek("k", &policy, 1).await,
        ] {
            match result {
                Err(StoreError::KeyState(e)) => assert!(e.to_string().contains("format"), "{e}"),
                other => panic!("expected a KeyState error, got {other:?}"),
            }
        }
    }
    assert_eq!(cas.entries.lock().unwrap().get(&key), Some(&newer));
    assert_eq!(atomic.entries.lock().unwrap().get(&key), Some(&newer.bytes));
    // A reset clears it.
    for store in &stores {
        store.reset("k", &policy).await.unwrap();
        assert!(store.check("k", &policy, 1).await.unwrap().allowed);
    }
}
