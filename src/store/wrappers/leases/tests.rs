//! The leases' own tests, over a memory store that counts its calls.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use super::*;
use crate::lease::Lease;
use crate::store::wrappers::user_store::check_in_order;
use crate::store::MemoryStore;
use crate::{clock::ManualClock, Algorithm, Quota};

/// A memory store that counts its calls and can take its time to lease.
#[derive(Debug, Clone)]
struct Counted {
    inner: MemoryStore,
    checks: Arc<AtomicU32>,
    acquires: Arc<AtomicU32>,
    releases: Arc<AtomicU32>,
    slow: Duration,
}

impl Counted {
    fn new(clock: &ManualClock) -> Self {
        Self {
            inner: MemoryStore::with_clock(clock.clone()),
            checks: Arc::default(),
            acquires: Arc::default(),
            releases: Arc::default(),
            slow: Duration::ZERO,
        }
    }
}

impl Store for Counted {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.checks.fetch_add(1, Ordering::SeqCst);
        self.inner.check(key, policy, cost).await
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.inner.peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.inner.reset(key, policy).await
    }

    async fn block(&self, key: &str, policy: &Policy, for_: Duration) -> Result<(), StoreError> {
        self.inner.block(key, policy, for_).await
    }
}

impl StoreExt for Counted {
    fn clock(&self) -> Option<&dyn Clock> {
        self.inner.clock()
    }

    /// As a user's store: one by one.
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        check_in_order(self, checks).await
    }

    async fn refund(&self, _: &str, _: &Policy, _: u32) -> Result<(), StoreError> {
        Err(StoreError::Unsupported("refund"))
    }

    /// As a remote store: nothing at once.
    fn check_ready(&self, _: &str, _: &Policy, _: u32) -> Option<Decision> {
        None
    }

    fn check_many_ready(&self, _: &[Check<'_>]) -> Option<Vec<Decision>> {
        None
    }

    fn abandoned(&self) {}

    fn label(&self) -> Arc<str> {
        "counted".into()
    }
}

impl Leasing for Counted {
    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        self.acquires.fetch_add(1, Ordering::SeqCst);
        if !self.slow.is_zero() {
            tokio::time::sleep(self.slow).await;
        }
        self.inner.acquire(key, policy, min, max).await
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, policy, unused, grant).await
    }
}

fn leased(quota: Quota, lease: Lease) -> Policy {
    Policy::new("hot", quota, Algorithm::Gcra)
        .unwrap()
        .with_lease(lease)
        .unwrap()
}

/// Lets spawned tasks (returns) run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
}

#[tokio::test]
async fn a_lease_is_spent_locally_with_honest_remaining() {
    let clock = ManualClock::new(1_000_000_000);
    let store = Counted::new(&clock);
    let leases = Leases::new(store.clone());
    let policy = leased(Quota::per_minute(100).unwrap(), Lease::tokens(5));
    let mut remaining = Vec::new();
    for _ in 0..7 {
        let d = leases.check("k", &policy, 1).await.unwrap();
        assert!(d.allowed);
        remaining.push(d.remaining);
    }
    assert_eq!(remaining, [99, 98, 97, 96, 95, 94, 93]);
    assert_eq!(store.acquires.load(Ordering::SeqCst), 2);
    assert_eq!(store.checks.load(Ordering::SeqCst), 0);
    // The store has counted both leases whole: 90 left there.
    assert_eq!(store.inner.check_now("k", &policy, 1).remaining, 89);
}

#[tokio::test]
async fn a_lease_in_hand_answers_at_once_and_an_empty_or_expired_one_does_not() {
    let clock = ManualClock::new(1_000_000_000);
    let store = Counted::new(&clock);
    let leases = Leases::new(store.clone());
    let policy = leased(Quota::per_minute(100).unwrap(), Lease::tokens(3));
    // No lease yet: only `check` can get one.
    assert!(leases.check_ready("k", &policy, 1).is_none());
    assert_eq!(leases.check("k", &policy, 1).await.unwrap().remaining, 99);
    let ready: Vec<u64> = (0..2)
        .map(|_| leases.check_ready("k", &policy, 1).unwrap().remaining)
        .collect();
    assert_eq!(ready, [98, 97]);
    // Spent: the next request waits for a refill.
    assert!(leases.check_ready("k", &policy, 1).is_none());
    assert_eq!(leases.check("k", &policy, 1).await.unwrap().remaining, 96);
    assert!(leases.check_ready("k", &policy, 1).is_some());
    // Expired with a unit unspent: `check` gives it back first.
    clock.advance(Duration::from_millis(1_001));
    assert!(leases.check_ready("k", &policy, 1).is_none());
    assert_eq!(store.acquires.load(Ordering::SeqCst), 2);
    assert_eq!(store.checks.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn policies_without_a_lease_go_straight_to_the_store() {
    let clock = ManualClock::new(0);
    let store = Counted::new(&clock);
    let leases = Leases::new(store.clone());
    let policy = Policy::new("p", Quota::per_minute(100).unwrap(), Algorithm::Gcra).unwrap();
    for _ in 0..3 {
        leases.check("k", &policy, 1).await.unwrap();
    }
    assert_eq!(store.checks.load(Ordering::SeqCst), 3);
    assert_eq!(store.acquires.load(Ordering::SeqCst), 0);
    assert!(leases.entries.lock().unwrap().is_empty());
}

#[tokio::test]
async fn unused_units_go_back_when_the_lease_expires() {
    let clock = ManualClock::new(1_000_000_000);
    let store = Counted::new(&clock);
    let leases = Leases::new(store.clone());
    // T = 6 s; a lease of 5 spans 30 s of the store's time, and lasts 1 s here.
    let policy = leased(Quota::per_minute(10).unwrap(), Lease::tokens(5));
    assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
    clock.advance(Duration::from_millis(1_001));
    // The next request finds the lease expired, gives its 4 unused units back, and leases
    // again.
    assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
    settle().await;
    assert_eq!(store.releases.load(Ordering::SeqCst), 1);
    // Spent: 1 + the new lease of 5; 4 came back. 10 − 6 = 4 left, minus this check.
    assert_eq!(store.inner.check_now("k", &policy, 1).remaining, 3);
}

#[tokio::test]
async fn a_spawned_timer_gives_units_back_when_traffic_stops() {
    let clock = ManualClock::new(1_000_000_000);
    let store = Counted::new(&clock);
    let leases = Leases::new(store.clone());
    // A 100 ms period: leases last 100 ms at most.
    let policy = leased(
        Quota::new(10, Duration::from_millis(100)).unwrap(),
        Lease::tokens(5),
    );
    assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
    tokio::time::sleep(Duration::from_millis(150)).await;
    settle().await;
    assert_eq!(store.releases.load(Ordering::SeqCst), 1);
    // The manual clock did not move: all 4 unused units came back.
    assert_eq!(store.inner.check_now("k", &policy, 1).remaining, 8);
}

#[tokio::test]
async fn a_lease_whose_request_was_dropped_still_gives_its_units_back_when_traffic_stops() {
    let clock = ManualClock::new(1_000_000_000);
    let mut store = Counted::new(&clock);
    store.slow = Duration::from_millis(30);
    let leases = Leases::new(store.clone());
    let policy = leased(
        Quota::new(10, Duration::from_millis(100)).unwrap(),
        Lease::tokens(5),
    );
    // Dropped while its refill is out; no request for the key comes after it.
    let dropped =
        tokio::time::timeout(Duration::from_millis(5), leases.check("k", &policy, 1)).await;
    assert!(dropped.is_err());
    tokio::time::sleep(Duration::from_millis(200)).await;
    settle().await;
    assert_eq!(store.releases.load(Ordering::SeqCst), 1);
    // The manual clock did not move: the 4 units the dropped request did not spend came back.
    assert_eq!(store.inner.check_now("k", &policy, 1).remaining, 8);
}

#[tokio::test]
async fn concurrent_requests_share_one_refill() {
    let clock = ManualClock::new(1_000_000_000);
    let mut store = Counted::new(&clock);
    store.slow = Duration::from_millis(30);
    let leases = Arc::new(Leases::new(store.clone()));
    let policy = leased(Quota::per_minute(1_000).unwrap(), Lease::tokens(100));
    let requests: Vec<_> = (0..50)
        .map(|_| {
            let (leases, policy) = (Arc::clone(&leases), policy.clone());
            tokio::spawn(async move { leases.check("k", &policy, 1).await.unwrap() })
        })
        .collect();
    for request in requests {
        assert!(request.await.unwrap().allowed);
    }
    assert_eq!(store.acquires.load(Ordering::SeqCst), 1);
    assert_eq!(store.inner.check_now("k", &policy, 1).remaining, 899);
}

#[tokio::test]
async fn a_request_dropped_during_its_refill_loses_no_units() {
    let clock = ManualClock::new(1_000_000_000);
    let mut store = Counted::new(&clock);
    store.slow = Duration::from_millis(30);
    let leases = Leases::new(store.clone());
    let policy = leased(Quota::per_minute(1_000).unwrap(), Lease::tokens(10));
    let dropped =
        tokio::time::timeout(Duration::from_millis(5), leases.check("k", &policy, 1)).await;
    assert!(dropped.is_err());
    settle().await;
    // The refill finished and kept its units: the next 9 requests spend them.
    for _ in 0..9 {
        assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
    }
    assert_eq!(store.acquires.load(Ordering::SeqCst), 1);
    assert_eq!(store.inner.check_now("k", &policy, 1).remaining, 989);
}

#[tokio::test]
async fn what_is_held_back_is_at_most_the_outstanding_leases_and_comes_back() {
    let clock = ManualClock::new(1_000_000_000);
    let store = MemoryStore::with_clock(clock.clone());
    // Two instances on one store; 20 per minute (T = 3 s), leases of 8.
    let (a, b) = (Leases::new(store.clone()), Leases::new(store.clone()));
    let policy = leased(Quota::per_minute(20).unwrap(), Lease::tokens(8));
    assert!(a.check("k", &policy, 1).await.unwrap().allowed);
    // A holds 7 unused: B gets exactly the other 12, then is denied.
    let mut allowed = 0;
    while b.check("k", &policy, 1).await.unwrap().allowed {
        allowed += 1;
    }
    assert_eq!(allowed, 12);
    // A's lease expires after 1 s; its next request gives the 7 back, then leases again
    // and gets them: without the return, nothing would fit.
    clock.advance(Duration::from_millis(1_001));
    let again = a.check("k", &policy, 1).await.unwrap();
    assert!(again.allowed);
    // The store's 0 left, and the 6 A holds.
    assert_eq!(again.remaining, 6);
    assert!(!store.check_now("k", &policy, 1).allowed);
}

/// A store whose leases fail after a while.
#[derive(Debug)]
struct Failing;

impl Store for Failing {
    async fn check(&self, _: &str, _: &Policy, _: u32) -> Result<Decision, StoreError> {
        Err(StoreError::Timeout)
    }

    async fn peek(&self, _: &str, _: &Policy, _: u32) -> Result<Decision, StoreError> {
        Err(StoreError::Timeout)
    }

    async fn reset(&self, _: &str, _: &Policy) -> Result<(), StoreError> {
        Err(StoreError::Timeout)
    }

    async fn block(&self, _: &str, _: &Policy, _: Duration) -> Result<(), StoreError> {
        Err(StoreError::Timeout)
    }
}

impl StoreExt for Failing {
    async fn check_many(&self, _: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        Err(StoreError::Timeout)
    }

    async fn refund(&self, _: &str, _: &Policy, _: u32) -> Result<(), StoreError> {
        Err(StoreError::Unsupported("refund"))
    }

    fn check_ready(&self, _: &str, _: &Policy, _: u32) -> Option<Decision> {
        None
    }

    fn check_many_ready(&self, _: &[Check<'_>]) -> Option<Vec<Decision>> {
        None
    }

    fn clock(&self) -> Option<&dyn Clock> {
        None
    }

    fn abandoned(&self) {}

    fn label(&self) -> Arc<str> {
        "failing".into()
    }
}

impl Leasing for Failing {
    async fn acquire(&self, _: &str, _: &Policy, _: u32, _: u32) -> Result<Grant, StoreError> {
        tokio::time::sleep(Duration::from_millis(30)).await;
        Err(StoreError::Timeout)
    }

    async fn release(&self, _: &str, _: &Policy, _: u32, _: &Grant) -> Result<u32, StoreError> {
        Ok(0)
    }
}

#[tokio::test]
async fn requests_waiting_for_a_failed_refill_share_its_error() {
    let leases = Arc::new(Leases::new(Failing));
    let policy = leased(Quota::per_minute(1_000).unwrap(), Lease::tokens(100));
    let started = Instant::now();
    let requests: Vec<_> = (0..20)
        .map(|_| {
            let (leases, policy) = (Arc::clone(&leases), policy.clone());
            tokio::spawn(async move { leases.check("k", &policy, 1).await })
        })
        .collect();
    for request in requests {
        assert!(request.await.unwrap().is_err());
    }
    // One failed refill of 30 ms for all 20, not 20 in turn.
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_refused_lease_is_a_denial_answered_locally_until_it_ends() {
    let clock = ManualClock::new(1_000_000_000);
    let store = Counted::new(&clock);
    let leases = Leases::new(store.clone());
    let policy = leased(Quota::per_second(4).unwrap(), Lease::tokens(4));
    for _ in 0..4 {
        assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
    }
    let denied = leases.check("k", &policy, 1).await.unwrap();
    assert!(!denied.allowed);
    // A lease asked for at least 1 of 4 fitting in 250 ms; the first lease asked for 4
    // and got them, so the key is not saturated yet.
    assert_eq!(denied.retry_after, Some(Duration::from_millis(250)));
    clock.advance(Duration::from_millis(100));
    let again = leases.check("k", &policy, 1).await.unwrap();
    assert_eq!(again.retry_after, Some(Duration::from_millis(150)));
    assert_eq!(store.acquires.load(Ordering::SeqCst), 2);
    // A saturated key asks for a whole lease: 4 units fit 1 s after they were spent.
    clock.advance(Duration::from_millis(150));
    let whole = leases.check("k", &policy, 1).await.unwrap();
    assert_eq!(whole.retry_after, Some(Duration::from_millis(750)));
    clock.advance(Duration::from_millis(750));
    assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
    assert_eq!(store.acquires.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn auto_sizes_from_the_rate_within_a_fifth_of_the_limit() {
    let clock = ManualClock::new(1_000_000_000);
    let store = Counted::new(&clock);
    let leases = Leases::new(store.clone());
    let policy = leased(Quota::per_second(10_000).unwrap(), Lease::Auto);
    // 1,000 requests a second, one per ms: about 100 ms of traffic is 100 units.
    for _ in 0..2_000 {
        assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
        clock.advance(Duration::from_millis(1));
    }
    let calls = store.acquires.load(Ordering::SeqCst);
    assert!((20..=40).contains(&calls), "{calls} leases");
    // Far faster traffic is capped at a fifth of the limit: 2,000.
    for _ in 0..5_000 {
        assert!(leases.check("k", &policy, 1).await.unwrap().allowed);
    }
    let entry = leases.entry("k", &policy, clock.now()).unwrap();
    assert_eq!(entry.lock().size, 2_000);
}
