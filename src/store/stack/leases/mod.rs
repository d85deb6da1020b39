//! [`Leases`]: hot keys decided locally from units of quota paid for in the store.
//!
//! Why it never admits more than the quota: every unit spent here was consumed in the store by
//! one atomic `StoreExt::acquire` before it was spent, as if that many requests had been
//! allowed, so the total admitted by all instances is at most what the algorithm admits.
//! What it costs is under-admission: units leased and not yet spent are unavailable to other
//! instances until they are spent, given back (`StoreExt::release`) or expire.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{Check, Grant, StoreExt};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::lease::Lease;
use crate::quota::Policy;
use crate::store::Store;
use crate::telemetry;

/// How long a lease lasts at most, unless the policy's period is shorter.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(1);
/// How many keys hold a lease at once at most.
const DEFAULT_CAPACITY: usize = 10_000;

/// Decides requests of policies with a [`Lease`] locally, from units leased from the inner
/// store; every other request goes straight to the inner store.
///
/// - **Exact.** A unit is spent here only after `StoreExt::acquire` consumed it in the store,
///   atomically, so all instances together never admit more than the quota. A store's
///   refusal to lease (no unit fits) is answered as a denial with the store's `retry_after`.
/// - **Under-admission, bounded.** Units leased but not yet spent are unavailable to other
///   instances: at most the sum of the outstanding leases, each at most its size
///   ([`Lease::Auto`]: about a tenth of a second of this instance's traffic, at most a fifth of
///   the limit and the burst). A lease lasts at most 1 s, and never longer than the policy's
///   period or its fixed window. Unused units are given back when the lease expires, by a
///   task spawned for it (or at the key's next request, whichever comes first), as far as the
///   algorithm can take them back exactly (`StoreExt::release`).
/// - **Saturated keys.** After a lease got fewer units than it asked for (the key is over its
///   quota), the next one asks for a whole lease or none: a refused lease's denial then lasts
///   until a whole lease fits, so a key over its quota costs about two store calls per lease
///   instead of one per request. Those units are not lost (the bucket keeps filling, it is
///   far from full); they are granted a little later, in one piece.
/// - **One refill at a time.** Concurrent requests on a key whose lease is spent wait for one
///   refill (and share its error if it fails). The refill runs as a spawned task, so a request
///   dropped while waiting loses no units: the task stores them for the next requests (the
///   dropped request's own cost counts as spent).
/// - **Failures.** A failing store is seen at the next refill, where the store below
///   (a [`Resilient`](crate::store::Resilient)) applies the layer's
///   [`OnStoreError`](crate::OnStoreError); the lease in hand is spent first.
/// - A request whose cost is more than what is left of the lease (but some is left), and
///   stacked limits (`StoreExt::check_many`), ask the inner store directly.
///
/// `remaining` in allowed answers is the store's remaining when the lease was granted plus
/// the lease's units this instance has not spent yet.
///
/// The layer's builder puts one between the cache of denials and the failure handling.
pub(crate) struct Leases<S> {
    shared: Arc<Shared<S>>,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    capacity: usize,
}

/// What refill and return tasks need.
struct Shared<S> {
    inner: S,
    epoch: Instant,
    lifetime: Duration,
}

impl<S: StoreExt> Shared<S> {
    /// The inner store's time when it reads a clock here, else a monotonic µs clock.
    fn now(&self) -> u64 {
        match self.inner.clock() {
            Some(clock) => clock.now(),
            None => u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX),
        }
    }

    /// Gives `unused` units of `grant` back, counting what came back and what did not.
    async fn give_back(&self, entry: &Entry, unused: u32, grant: Grant) {
        let taken = self
            .inner
            .release(&entry.key, &entry.policy, unused, &grant)
            .await
            .unwrap_or(0)
            .min(unused);
        telemetry::lease_tokens_returned(entry.policy.name(), taken);
        telemetry::lease_tokens_expired(entry.policy.name(), unused - taken);
    }
}

/// One key's lease under one policy.
struct Entry {
    policy: Policy,
    key: Box<str>,
    state: Mutex<LeaseState>,
    /// Held by the refill in flight: the others wait for it.
    refill: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
struct LeaseState {
    /// Counts leases, so that a return task touches only its own.
    generation: u64,
    /// Units of the current lease not spent yet.
    balance: u32,
    /// The current lease as the store granted it.
    grant: Option<Grant>,
    /// When the current lease was granted and when it expires (µs, see `Shared::now`).
    granted_at: u64,
    expires_at: u64,
    /// Units asked for since the last refill, and when that was: the rate `Auto` sizes from.
    demand: u64,
    last_refill: u64,
    /// The size of the last lease asked for.
    size: u32,
    /// Whether the last lease got fewer units than it asked for.
    saturated: bool,
    /// The store's last refusal, and until when it holds.
    denial: Option<(u64, Decision)>,
    /// Refills done, and why the last one failed if it did: requests that waited for a
    /// refill that failed share its error instead of each trying (and timing out) in turn.
    refills: u64,
    failed: Option<String>,
}

/// What the lease in hand says about a request.
enum Spend {
    Answer(Decision),
    /// Some units are left, fewer than the cost: ask the store directly.
    Direct,
    /// Nothing left: refill.
    Empty,
}

impl LeaseState {
    /// Takes the unused units of an expired lease, to be given back.
    fn take_expired(&mut self, now: u64) -> Option<(u32, Grant)> {
        if !self.has_expired_units(now) {
            return None;
        }
        let unused = std::mem::take(&mut self.balance);
        self.grant.map(|grant| (unused.min(grant.granted), grant))
    }

    /// Whether the lease in hand has expired with units left to give back.
    fn has_expired_units(&self, now: u64) -> bool {
        now >= self.expires_at && self.balance > 0
    }

    /// Spends `cost` from the lease in hand, if it can.
    fn spend(&mut self, cost: u32, now: u64) -> Spend {
        if self.balance >= cost {
            self.balance -= cost;
            let Some(grant) = self.grant else {
                return Spend::Empty;
            };
            let d = grant.decision;
            let elapsed = Duration::from_micros(now.saturating_sub(self.granted_at));
            return Spend::Answer(Decision {
                allowed: true,
                remaining: d.remaining + u64::from(self.balance),
                reset_after: d.reset_after.saturating_sub(elapsed),
                retry_after: None,
                ..d
            });
        }
        if self.balance > 0 {
            return Spend::Direct;
        }
        match self.denial {
            Some((until, d)) if now < until => {
                let elapsed = Duration::from_micros(until.saturating_sub(now));
                Spend::Answer(Decision {
                    retry_after: Some(elapsed),
                    ..d
                })
            }
            _ => Spend::Empty,
        }
    }

    /// The next lease's smallest and largest acceptable sizes for a request of `cost`.
    fn want(&mut self, cost: u32, policy: &Policy, lifetime: Duration, now: u64) -> (u32, u32) {
        let params = policy.params();
        let size = match policy.lease() {
            Some(Lease::Tokens(n)) => n,
            // No rate known yet: one unit.
            _ if self.size == 0 => 1,
            _ => {
                // About a tenth of a lifetime of this instance's traffic for the key.
                let horizon = u64::try_from(lifetime.as_micros() / 10).unwrap_or(u64::MAX);
                let elapsed = now.saturating_sub(self.last_refill).max(1);
                let by_rate = self.demand.saturating_mul(horizon).div_ceil(elapsed);
                let cap = params.burst.min(params.limit.div_ceil(5)).max(1);
                // Over its quota, a key's requests are mostly answered by the cache of denials
                // above and its rate looks lower than it is: the size does not shrink then.
                let floor = match self.saturated {
                    true => self.size,
                    false => self.size / 2,
                };
                let size = by_rate.max(u64::from(floor)).clamp(1, cap);
                u32::try_from(size).unwrap_or(u32::MAX)
            }
        };
        self.size = size;
        self.demand = 0;
        self.last_refill = now;
        let max = size.max(cost);
        let min = if self.saturated { size.max(cost) } else { cost };
        (min.min(max), max)
    }
}

impl<S: StoreExt> Leases<S> {
    /// Leases around `inner`, each lasting at most 1 s, for up to 10,000 keys at once.
    pub(crate) fn new(inner: S) -> Self {
        Self {
            shared: Arc::new(Shared {
                inner,
                epoch: Instant::now(),
                lifetime: DEFAULT_LIFETIME,
            }),
            entries: Mutex::new(HashMap::new()),
            capacity: DEFAULT_CAPACITY,
        }
    }

    /// The wrapped store.
    pub(crate) fn get_ref(&self) -> &S {
        &self.shared.inner
    }

    /// The entry of `key` under `policy`, made if needed; `None` when as many keys as the
    /// capacity hold live leases.
    fn entry(&self, key: &str, policy: &Policy, now: u64) -> Option<Arc<Entry>> {
        let map_key = format!("{}\0{}", policy.name(), key);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get(&map_key) {
            if entry.policy == *policy {
                return Some(Arc::clone(entry));
            }
        } else if entries.len() >= self.capacity {
            entries.retain(|_, e| e.is_live(now));
            if entries.len() >= self.capacity {
                return None;
            }
        }
        let entry = Arc::new(Entry {
            policy: policy.clone(),
            key: key.into(),
            state: Mutex::new(LeaseState {
                last_refill: now,
                ..LeaseState::default()
            }),
            refill: Arc::new(tokio::sync::Mutex::new(())),
        });
        entries.insert(map_key, Arc::clone(&entry));
        Some(entry)
    }

    /// Drops this instance's lease of `key` under `policy` (its unspent units are not given
    /// back: they were taken from a state that a reset or block replaced) and any refusal it
    /// holds; with `keep_lease`, only the refusal (a refund may let the key lease again).
    fn forget(&self, key: &str, policy: &Policy, keep_lease: bool) {
        let map_key = format!("{}\0{}", policy.name(), key);
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = entries.get(&map_key) else {
            return;
        };
        let mut state = entry.lock();
        state.denial = None;
        if !keep_lease {
            // A new generation: the old lease's return timer does nothing.
            state.generation += 1;
            state.balance = 0;
            state.grant = None;
            state.expires_at = 0;
        }
    }

    /// Spends from the lease in hand; first gives an expired lease's unused units back, and
    /// waits for that, so that a refill after it can get them again.
    async fn spend(&self, entry: &Arc<Entry>, cost: u32, count_demand: bool) -> Spend {
        let now = self.shared.now();
        let (spent, expired) = {
            let mut state = entry.lock();
            if count_demand {
                state.demand += u64::from(cost);
            }
            let expired = state.take_expired(now);
            (state.spend(cost, now), expired)
        };
        let Some((unused, grant)) = expired else {
            return spent;
        };
        // Spawned, so that a request dropped meanwhile still gives them back.
        let (shared, returned) = (Arc::clone(&self.shared), Arc::clone(entry));
        let give_back = async move { shared.give_back(&returned, unused, grant).await };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let _ = runtime.spawn(give_back).await;
            }
            Err(_) => give_back.await,
        }
        // The lease was expired: nothing was spent from it.
        let now = self.shared.now();
        entry.lock().spend(cost, now)
    }

    /// Returns the unused units of lease `generation` of `entry` when it expires, unless a
    /// request has already done so.
    fn expire_later(&self, entry: &Arc<Entry>, generation: u64, after: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, entry) = (Arc::clone(&self.shared), Arc::clone(entry));
        runtime.spawn(async move {
            tokio::time::sleep(after).await;
            let expired = {
                let mut state = entry.lock();
                if state.generation != generation {
                    return;
                }
                // Expired by the timer, whatever the clock says (a manual clock in tests).
                let now = state.expires_at;
                state.take_expired(now)
            };
            if let Some((unused, grant)) = expired {
                shared.give_back(&entry, unused, grant).await;
            }
        });
    }

    /// Asks the store for a lease for a request of `cost` and spends `cost` from it; the
    /// caller holds `entry.refill`, which the refill keeps until it has stored the lease.
    async fn refill(
        &self,
        entry: &Arc<Entry>,
        guard: tokio::sync::OwnedMutexGuard<()>,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let sent_at = self.shared.now();
        let (min, max) =
            entry
                .lock()
                .want(cost, &entry.policy, self.lifetime(&entry.policy), sent_at);
        let (shared, task_entry) = (Arc::clone(&self.shared), Arc::clone(entry));
        let lifetime = self.lifetime(&entry.policy);
        let task = async move {
            telemetry::lease_call(task_entry.policy.name());
            let grant = shared
                .inner
                .acquire(&task_entry.key, &task_entry.policy, min, max)
                .await;
            let stored = task_entry.store(grant, cost, max, sent_at, lifetime);
            drop(guard);
            stored
        };
        // Spawned, so that a request dropped meanwhile loses nothing: the task stores the
        // lease for the next requests.
        let stored = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime
                .spawn(task)
                .await
                .map_err(|e| StoreError::backend(format!("lease refill task failed: {e}")))?,
            Err(_) => task.await,
        };
        let (decision, generation, expires_in) = stored?;
        if let Some(generation) = generation {
            self.expire_later(entry, generation, expires_in);
        }
        Ok(decision)
    }

    /// How long a lease of `policy` lasts at most: never longer than its period.
    fn lifetime(&self, policy: &Policy) -> Duration {
        self.shared.lifetime.min(policy.quota().period())
    }

    /// [`Store::check`] for a request under a leased policy whose lease in hand could not
    /// answer it at once: spent from the lease, or the lease refilled (one refill per key at a
    /// time), or sent to the store directly.
    async fn check_leased(
        &self,
        entry: Arc<Entry>,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        match self.spend(&entry, cost, true).await {
            Spend::Answer(decision) => return Ok(decision),
            Spend::Direct => return self.shared.inner.check(key, policy, cost).await,
            Spend::Empty => {}
        }
        let refills = entry.lock().refills;
        let guard = Arc::clone(&entry.refill).lock_owned().await;
        // Another request's refill may have come meanwhile, or failed.
        let failed = {
            let state = entry.lock();
            (state.refills != refills)
                .then(|| state.failed.clone())
                .flatten()
        };
        if let Some(failure) = failed {
            return Err(StoreError::backend(format!(
                "the lease refill this request waited for failed: {failure}"
            )));
        }
        match self.spend(&entry, cost, false).await {
            Spend::Answer(decision) => Ok(decision),
            Spend::Direct => {
                drop(guard);
                self.shared.inner.check(key, policy, cost).await
            }
            Spend::Empty => self.refill(&entry, guard, cost).await,
        }
    }
}

impl Entry {
    fn lock(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether forgetting this entry could lose units or a refill: it holds a lease, a
    /// refusal that still holds, or a refill in flight.
    fn is_live(&self, now: u64) -> bool {
        let state = self.lock();
        state.balance > 0
            || state.expires_at > now
            || state.denial.is_some_and(|(until, _)| until > now)
            || self.refill.try_lock().is_err()
    }

    /// Stores the store's answer to a lease asked for at `sent_at` of up to `max`, and spends
    /// `cost` from it. Returns the request's decision and, with a new lease, its generation
    /// and how long until it expires.
    fn store(
        &self,
        grant: Result<Grant, StoreError>,
        cost: u32,
        max: u32,
        sent_at: u64,
        lifetime: Duration,
    ) -> Result<(Decision, Option<u64>, Duration), StoreError> {
        let mut state = self.lock();
        state.refills += 1;
        let grant = match grant {
            Ok(grant) => grant,
            Err(error) => {
                state.failed = Some(error.to_string());
                return Err(error);
            }
        };
        state.failed = None;
        if grant.granted == 0 {
            let until = grant.decision.retry_after.map_or(sent_at, |r| {
                sent_at.saturating_add(u64::try_from(r.as_micros()).unwrap_or(u64::MAX))
            });
            state.denial = Some((until, grant.decision));
            state.saturated = true;
            return Ok((grant.decision, None, Duration::ZERO));
        }
        telemetry::lease_tokens_granted(self.policy.name(), grant.granted);
        // A fixed window's units are spent within their window only.
        let mut lasts = lifetime;
        if !self.policy.algorithm().uses_burst() {
            lasts = lasts.min(grant.decision.reset_after);
        }
        state.generation += 1;
        state.grant = Some(grant);
        state.balance = grant.granted;
        state.granted_at = sent_at;
        state.expires_at = sent_at.saturating_add(u64::try_from(lasts.as_micros()).unwrap_or(0));
        state.saturated = grant.granted < max;
        state.denial = None;
        let generation = Some(state.generation);
        match state.spend(cost, sent_at) {
            Spend::Answer(decision) => Ok((decision, generation, lasts)),
            // Only a store that breaks `acquire`'s contract grants fewer than asked.
            Spend::Direct | Spend::Empty => Err(StoreError::backend(format!(
                "the store granted a lease of {} units, fewer than the {cost} asked for at least",
                grant.granted
            ))),
        }
    }
}

impl<S: StoreExt> Store for Leases<S> {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        let leased = policy.lease().is_some() && u64::from(cost) <= policy.params().burst;
        let entry = match leased {
            true => self.entry(key, policy, self.shared.now()),
            false => None,
        };
        match entry {
            None => self.shared.inner.check(key, policy, cost).await,
            // Boxed: the leased path waits on more than one thing, and a request it does not
            // concern should not carry the room for them.
            Some(entry) => Box::pin(self.check_leased(entry, key, policy, cost)).await,
        }
    }

    /// The store's view: units this instance holds in a lease count there as spent.
    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.shared.inner.peek(key, policy, cost).await
    }

    /// Resets the client in the store, and drops this instance's lease of it (a refill
    /// already in flight may still store one lease, taken before the reset).
    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        let result = self.shared.inner.reset(key, policy).await;
        self.forget(key, policy, false);
        result
    }

    /// Blocks the client in the store, and drops this instance's lease of it, as
    /// [`reset`](Self::reset) does: the next request asks the store, which answers the block.
    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let result = self.shared.inner.block(key, policy, duration).await;
        self.forget(key, policy, false);
        result
    }
}

impl<S: StoreExt> StoreExt for Leases<S> {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        match checks {
            [one] => Ok(vec![self.check(one.key, one.policy, one.cost).await?]),
            _ => self.shared.inner.check_many(checks).await,
        }
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.shared.inner.clock()
    }

    /// A leased request spent from the lease in hand (or answered by the refusal it holds);
    /// a request that is not leased, the store's decision at once. An empty or expired lease
    /// is [`check`](Self::check)'s to refill or give back.
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        let leased = policy.lease().is_some() && u64::from(cost) <= policy.params().burst;
        let entry = match leased {
            true => {
                let now = self.shared.now();
                self.entry(key, policy, now).map(|entry| (entry, now))
            }
            false => None,
        };
        let Some((entry, now)) = entry else {
            return self.shared.inner.check_ready(key, policy, cost);
        };
        let mut state = entry.lock();
        if state.has_expired_units(now) {
            return None;
        }
        let decision = match state.spend(cost, now) {
            Spend::Answer(decision) => decision,
            Spend::Direct => {
                drop(state);
                let decision = self.shared.inner.check_ready(key, policy, cost)?;
                state = entry.lock();
                decision
            }
            Spend::Empty => return None,
        };
        state.demand += u64::from(cost);
        Some(decision)
    }

    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        self.shared.inner.acquire(key, policy, min, max).await
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        self.shared.inner.release(key, policy, unused, grant).await
    }

    /// Refunds the client in the store, and drops this instance's refusal to lease to it
    /// (the lease in hand stays).
    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        let result = self.shared.inner.refund(key, policy, n).await;
        self.forget(key, policy, true);
        result
    }
}

impl<S: fmt::Debug> fmt::Debug for Leases<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("inner", &self.shared.inner)
            .field("lifetime", &self.shared.lifetime)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::store::MemoryStore;
    use crate::{Algorithm, ManualClock, Quota};

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
        async fn check(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            self.checks.fetch_add(1, Ordering::SeqCst);
            self.inner.check(key, policy, cost).await
        }

        async fn peek(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            self.inner.peek(key, policy, cost).await
        }

        async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
            self.inner.reset(key, policy).await
        }

        async fn block(
            &self,
            key: &str,
            policy: &Policy,
            for_: Duration,
        ) -> Result<(), StoreError> {
            self.inner.block(key, policy, for_).await
        }
    }

    impl StoreExt for Counted {
        fn clock(&self) -> Option<&dyn Clock> {
            self.inner.clock()
        }

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
        async fn acquire(&self, _: &str, _: &Policy, _: u32, _: u32) -> Result<Grant, StoreError> {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Err(StoreError::Timeout)
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
}
