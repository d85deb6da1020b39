//! [`Leases`]: hot keys decided locally from units of quota paid for in the store.
//!
//! Why it never admits more than the quota: every unit spent here was consumed in the store by
//! one atomic `StoreExt::acquire` before it was spent, as if that many requests had been
//! allowed, so the total admitted by all instances is at most what the algorithm admits.
//! What it costs is under-admission: units leased and not yet spent are unavailable to other
//! instances until they are spent, given back (`StoreExt::release`) or expire.
//!
//! # The rule for leasing and giving back
//!
//! All time in µs; `T = period / limit`, `now` the store's time.
//!
//! - **Buckets** (`Gcra`, `LeakyBucket`, `TokenBucket`). Asking for `min..=max` units is one
//!   atomic store call that grants as many `g ≤ max` as the algorithm would admit back to back
//!   at that instant, and stores the state as if `g` requests had been allowed (none if
//!   `g < min`, with the denial a request of cost `min` would get). The grant ends at
//!   `lease_end = max(tat, now) + g·T` in the TAT's time (for the token bucket: when the
//!   bucket is full again), and the store replies with it (the grant's `mark`).
//! - **Giving back** `u` unused units at `now` takes back only what is still ahead of now: the
//!   TAT moves back by `min(u·T, lease_end − now)`, by nothing if that is negative, and never
//!   before `now` (`algorithm/lease.rs` is the reference `store/redis/lua/lease.lua`
//!   matches). Units whose slots have already drained were refilled by time itself; taking
//!   them back again would erase other instances' later consumption and admit too much. For
//!   example, with a lease of 10 at 0, 1 unit taken by another instance at 20T, and a return
//!   of 5 at 20T, the TAT must end at 21T, not 20T
//!   (`a_return_on_redis_never_erases_later_consumption` checks it on Redis).
//! - **Fixed windows** (`FixedWindow`, `FixedWindowFromFirst`). A lease is an `INCRBY` of up
//!   to `limit − count` in the current window (the `mark` is the window's start); unused units
//!   are given back only within the same window: a later window starts whole anyway.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::on_drop::OnDrop;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{now_us, InFlightSlots, Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::slot::HeldSlot;
use crate::store::Store;
use crate::telemetry;

mod entry;

use entry::{Entry, LeaseState, Spend};

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
///   [`OnStoreError`](crate::store::OnStoreError); the lease in hand is spent first.
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
    lifetime: Duration,
}

impl<S: Leasing> Shared<S> {
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

    /// Returns the unused units of lease `generation` of `entry` when it expires, unless a
    /// request has already done so.
    fn expire_later(self: &Arc<Self>, entry: &Arc<Entry>, generation: u64, after: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (shared, entry) = (Arc::clone(self), Arc::clone(entry));
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
}

impl<S: Leasing> Leases<S> {
    /// Leases around `inner`, each lasting at most 1 s, for up to 10,000 keys at once.
    pub(crate) fn new(inner: S) -> Self {
        Self {
            shared: Arc::new(Shared {
                inner,
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
        let now = now_us(&self.shared.inner);
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
        let now = now_us(&self.shared.inner);
        entry.lock().spend(cost, now)
    }

    /// Asks the store for a lease for a request of `cost` and spends `cost` from it; the
    /// caller holds `entry.refill`, which the refill keeps until it has stored the lease.
    async fn refill(
        &self,
        entry: &Arc<Entry>,
        guard: tokio::sync::OwnedMutexGuard<()>,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let sent_at = now_us(&self.shared.inner);
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
            if let Ok((_, Some(generation), expires_in)) = &stored {
                shared.expire_later(&task_entry, *generation, *expires_in);
            }
            stored
        };
        // Spawned, so that a request dropped meanwhile loses nothing: the task stores the
        // lease for the next requests, and has its unused units given back when it expires.
        let stored = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime
                .spawn(task)
                .await
                .map_err(|e| StoreError::backend(format!("lease refill task failed: {e}")))?,
            Err(_) => task.await,
        };
        stored.map(|(decision, _, _)| decision)
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

impl<S: Leasing> Store for Leases<S> {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        let leased = policy.lease().is_some() && u64::from(cost) <= policy.params().burst;
        let entry = match leased {
            true => self.entry(key, policy, now_us(&self.shared.inner)),
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

    /// Resets the client in the store, and drops this instance's lease of it, also when the
    /// call is dropped first (a refill already in flight may still store one lease, taken
    /// before the reset).
    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        let _forget = OnDrop(|| self.forget(key, policy, false));
        self.shared.inner.reset(key, policy).await
    }

    /// Blocks the client in the store, and drops this instance's lease of it, as
    /// [`reset`](Self::reset) does: the next request asks the store, which answers the block.
    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let _forget = OnDrop(|| self.forget(key, policy, false));
        self.shared.inner.block(key, policy, duration).await
    }
}

impl<S: Leasing> StoreExt for Leases<S> {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        match checks {
            // A check that charges is decided by the store, which records it even when
            // denied; no lease decides it.
            [one] if !one.charge => Ok(vec![self.check(one.key, one.policy, one.cost).await?]),
            _ => self.shared.inner.check_many(checks).await,
        }
    }

    /// As [`check_many`](Self::check_many), at once when the lease in hand or the store
    /// below can.
    fn check_many_ready(&self, checks: &[Check<'_>]) -> Option<Vec<Decision>> {
        match checks {
            [one] if !one.charge => Some(vec![self.check_ready(one.key, one.policy, one.cost)?]),
            _ => self.shared.inner.check_many_ready(checks),
        }
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.shared.inner.clock()
    }

    /// A leased request spent from the lease in hand (or answered by the refusal it holds);
    /// a request that is not leased, the store's decision at once. An empty or expired lease
    /// is [`check`](Self::check)'s to refill or give back.
    #[inline]
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        let leased = policy.lease().is_some() && u64::from(cost) <= policy.params().burst;
        let entry = match leased {
            true => {
                let now = now_us(&self.shared.inner);
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

    fn abandoned(&self) {
        self.shared.inner.abandoned();
    }

    fn label(&self) -> Arc<str> {
        self.shared.inner.label()
    }

    /// Refunds the client in the store, and drops this instance's refusal to lease to it
    /// (the lease in hand stays).
    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        let _forget = OnDrop(|| self.forget(key, policy, true));
        self.shared.inner.refund(key, policy, n).await
    }
}

/// Passed on: overrides are the store's.
impl<S: Leasing + QuotaOverrides> QuotaOverrides for Leases<S> {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        self.shared.inner.quota_override(rule, key).await
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        (self.shared.inner)
            .set_quota_override(rule, key, quota, ttl)
            .await
    }
}

/// Slots are not leased units: passed on.
impl<S: Leasing + InFlightSlots> InFlightSlots for Leases<S> {
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        self.shared.inner.take_slot(key, limit, id).await
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        self.shared.inner.give_back_slot(key, limit, id).await
    }

    fn give_back_slot_now(&self, key: &str, limit: &InFlight, id: u64) -> bool {
        self.shared.inner.give_back_slot_now(key, limit, id)
    }

    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        self.shared.inner.renew_slots(slots).await
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
mod tests;
