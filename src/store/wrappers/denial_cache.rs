//! [`DenialCache`]: answers a key the store has already denied, locally, until its
//! `retry_after`, so a flooded key costs no round trips.
//!
//! Why it is exact: a store's denial of `(policy, key)` for cost `c` with `retry_after = r`
//! at time `t` stays true for any cost ≥ `c` until `t + r`. Denied requests change no state,
//! and other instances can only consume more, which moves the earliest allowed time later,
//! never earlier. So a cached denial never denies what the store would allow. The entry
//! expires at the local time the call was *sent* plus `r`: the store decided at or after
//! that, so the entry never outlives the denial.

use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use foldhash::quality::RandomState;

use super::on_drop::OnDrop;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{now_us, InFlightSlots, QuotaOverrides, StoreExt};
use crate::store::slot::HeldSlot;
use crate::store::Store;

const SHARDS: usize = 16;

/// How long a denial is answered here at most before the store is asked again (µs), however
/// long the denial lasts: a reset, refund or block made through another instance reaches this
/// one's cache within it. A flooded key still costs the store one call per this long.
const MAX_AGE: u64 = 5_000_000;

/// Keeps the store's latest denial of each `(policy, key)` and answers requests of that cost
/// or more locally until the denial ends, with the headers the store would give: for a
/// request of the denied cost, the same `Retry-After` and numbers; for a costlier one,
/// `Retry-After` says when the denied cost would pass, a lower bound (the client asks again
/// and the store answers).
///
/// The layer's builder puts one around its store, on by default
/// ([`denial_cache`](crate::RateLimitLayerBuilder::denial_cache) turns it off). It works for
/// every algorithm, since each one's `retry_after` is exact: for the sliding window counter,
/// the estimate only falls as time passes unless others add to it, so its `retry_after` is
/// still a lower bound. Only requests with one limit are answered from the cache; a request
/// under stacked limits always asks the store, which reports every limit's numbers.
///
/// Blocks ([`Policy::block_for`], [`Store::block`]) keep it exact: a block only makes a denial
/// longer, and its `retry_after` is the rest of the block. What makes a denial shorter is
/// [`Store::reset`] or `StoreExt::refund`: through this cache they drop its denial of that
/// client; another instance's cache asks the store again within 5 s (a cached denial is
/// answered for 5 s at most, however long it lasts, e.g. a 15-minute block).
///
/// Memory is bounded: at most `capacity` denials (default 100,000), dropped as they expire.
/// While no cached denial is running (nothing denied lately), a request costs the cache one
/// clock read: no hashing and no lock.
///
/// While the store is away and [`Resilient`](crate::store::Resilient) falls back to memory,
/// the fallback's denials are cached like the store's: after the store is back, such a client
/// stays denied until that denial's `Retry-After`, or 5 s, at most.
pub(crate) struct DenialCache<S> {
    inner: S,
    /// Keyed by a hash of `(policy, key)`, foldhash seeded at random per cache (client keys
    /// cannot be chosen to collide), which each shard's map hashes again.
    shards: Box<[Mutex<HashMap<u64, Denial, RandomState>>]>,
    per_shard: usize,
    hasher: RandomState,
    hits: AtomicU64,
    /// When the latest-ending denial ever cached ends (see `now`). Until then a request may be
    /// covered; after it, none is, and a request skips the lookup.
    running_until: AtomicU64,
}

/// A request the cache does not answer: when it was sent to the store, and its hash when
/// cached denials were running then.
struct Miss {
    sent_at: u64,
    hash: Option<u64>,
}

/// One cached denial. The map is keyed by a hash of `(policy, key)`; these fields tell a
/// collision apart.
struct Denial {
    policy: Policy,
    key: Box<str>,
    /// The smallest cost it answers.
    cost: u32,
    /// When it was sent to the store and when it ends, in the cache's µs (see `now`).
    sent_at: u64,
    until: u64,
    /// When this cache stops answering it: `until`, or `MAX_AGE` after `sent_at` if sooner.
    expires: u64,
    decision: Decision,
}

impl<S: StoreExt> DenialCache<S> {
    /// A cache of up to `capacity` denials in front of `inner`; 0 turns it off.
    pub(crate) fn new(inner: S, capacity: usize) -> Self {
        Self {
            inner,
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::default()))
                .collect(),
            per_shard: capacity.div_ceil(SHARDS),
            hasher: RandomState::default(),
            hits: AtomicU64::new(0),
            running_until: AtomicU64::new(0),
        }
    }

    /// How many requests were answered from the cache.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The wrapped store.
    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, HashMap<u64, Denial, RandomState>> {
        // The modulo keeps the index in range.
        let shard = &self.shards[(hash % SHARDS as u64) as usize];
        shard.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn hash(&self, policy: &Policy, key: &str) -> u64 {
        self.hasher
            .hash_one((policy.name(), policy.algorithm(), policy.quota(), key))
    }

    /// The cached denial covering this request at `now`, as the store would give it now.
    fn lookup(
        &self,
        hash: u64,
        key: &str,
        policy: &Policy,
        cost: u32,
        now: u64,
    ) -> Option<Decision> {
        let shard = self.shard(hash);
        let denial = shard.get(&hash)?;
        let covers = now < denial.expires
            && cost >= denial.cost
            && &*denial.key == key
            && denial.policy == *policy;
        if !covers {
            return None;
        }
        let elapsed = Duration::from_micros(now.saturating_sub(denial.sent_at));
        // `remaining` as the store gave it: what has refilled since is not known here, so it
        // is a lower bound (0 for a request of cost 1).
        Some(Decision {
            reset_after: denial.decision.reset_after.saturating_sub(elapsed),
            retry_after: Some(Duration::from_micros(denial.until - now)),
            ..denial.decision
        })
    }

    /// The cached denial answering a request about to be sent to the store, or what
    /// remembering the store's answer needs.
    fn cached(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, Miss> {
        let sent_at = now_us(&self.inner);
        // Once every cached denial has ended (always, while nothing is denied), no request is
        // covered and an allowed one has no denial to drop: no hashing, no lock. A denial
        // cached meanwhile by another request is kept; it stays exact, since this request can
        // only have moved its end later.
        let running = sent_at < self.running_until.load(Ordering::Relaxed);
        let hash = running.then(|| self.hash(policy, key));
        if let Some(hash) = hash {
            if let Some(decision) = self.lookup(hash, key, policy, cost, sent_at) {
                self.hits.fetch_add(1, Ordering::Relaxed);
                crate::telemetry::denial_cache_hit();
                return Ok(decision);
            }
        }
        Err(Miss { sent_at, hash })
    }

    /// Remembers the store's answer to a request the cache missed: a denial, or an allowed
    /// request while denials are running (it may drop one).
    fn remember_answer(&self, miss: Miss, request: (&str, &Policy, u32), decision: Decision) {
        if miss.hash.is_some() || !decision.allowed {
            let (key, policy, _) = request;
            let hash = miss.hash.unwrap_or_else(|| self.hash(policy, key));
            self.remember(hash, request, miss.sent_at, decision);
        }
    }

    /// Drops the cached denial of `key` under `policy`, if any.
    fn forget(&self, policy: &Policy, key: &str) {
        let hash = self.hash(policy, key);
        let mut shard = self.shard(hash);
        if shard
            .get(&hash)
            .is_some_and(|d| &*d.key == key && d.policy == *policy)
        {
            shard.remove(&hash);
        }
    }

    /// Remembers the store's answer to a call sent at `sent_at`: a denial is kept; an
    /// allowed request drops the key's denial, whose numbers it changed.
    fn remember(&self, hash: u64, request: (&str, &Policy, u32), sent_at: u64, decision: Decision) {
        let (key, policy, cost) = request;
        let mut shard = self.shard(hash);
        let retry_after = match decision.retry_after {
            Some(retry_after) if !decision.allowed => retry_after,
            _ => {
                shard.remove(&hash);
                return;
            }
        };
        let until = sent_at.saturating_add(u64::try_from(retry_after.as_micros()).unwrap_or(0));
        if shard.len() >= self.per_shard && !shard.contains_key(&hash) {
            let now = now_us(&self.inner);
            shard.retain(|_, d| d.expires > now);
            if shard.len() >= self.per_shard {
                return;
            }
        }
        let expires = until.min(sent_at.saturating_add(MAX_AGE));
        self.running_until.fetch_max(expires, Ordering::Relaxed);
        shard.insert(
            hash,
            Denial {
                policy: policy.clone(),
                key: key.into(),
                cost,
                sent_at,
                until,
                expires,
                decision,
            },
        );
    }
}

impl<S: StoreExt> Store for DenialCache<S> {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        if self.per_shard == 0 {
            return self.inner.check(key, policy, cost).await;
        }
        let miss = match self.cached(key, policy, cost) {
            Ok(decision) => return Ok(decision),
            Err(miss) => miss,
        };
        let decision = self.inner.check(key, policy, cost).await?;
        self.remember_answer(miss, (key, policy, cost), decision);
        Ok(decision)
    }

    /// A live cached denial answers (a peek changes nothing the denial depends on); else the
    /// store peeks, and a denial it reports is cached like a checked one: a dry run's denial
    /// is as true as a real one until its `retry_after`.
    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        if self.per_shard == 0 {
            return self.inner.peek(key, policy, cost).await;
        }
        let sent_at = now_us(&self.inner);
        let hash = self.hash(policy, key);
        if let Some(decision) = self.lookup(hash, key, policy, cost, sent_at) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            crate::telemetry::denial_cache_hit();
            return Ok(decision);
        }
        let decision = self.inner.peek(key, policy, cost).await?;
        // An allowed peek consumed nothing, so a denial of a costlier request still holds.
        if !decision.allowed {
            self.remember(hash, (key, policy, cost), sent_at, decision);
        }
        Ok(decision)
    }

    /// Resets the client in the store, then drops this instance's cached denial of it, also
    /// when the call is dropped first (the reset may have reached the store). Other
    /// instances' caches keep theirs until it ends (its `Retry-After`, or 5 s, at most).
    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        let _forget = OnDrop(|| self.forget(policy, key));
        self.inner.reset(key, policy).await
    }

    /// Blocks the client in the store and drops this instance's cached denial of it: the
    /// next request asks the store, which answers with the block (and is cached then).
    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let _forget = OnDrop(|| self.forget(policy, key));
        self.inner.block(key, policy, duration).await
    }
}

impl<S: StoreExt> StoreExt for DenialCache<S> {
    /// A cached denial, or the store's decision at once (remembered as [`check`](Self::check)
    /// remembers it).
    #[inline]
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        if self.per_shard == 0 {
            return self.inner.check_ready(key, policy, cost);
        }
        let miss = match self.cached(key, policy, cost) {
            Ok(decision) => return Some(decision),
            Err(miss) => miss,
        };
        let decision = self.inner.check_ready(key, policy, cost)?;
        self.remember_answer(miss, (key, policy, cost), decision);
        Some(decision)
    }

    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        match checks {
            // A check that charges goes to the store, which records it even when denied.
            [one] if !one.charge => Ok(vec![self.check(one.key, one.policy, one.cost).await?]),
            _ => self.inner.check_many(checks).await,
        }
    }

    /// As [`check_many`](Self::check_many), at once when the store below can.
    fn check_many_ready(&self, checks: &[Check<'_>]) -> Option<Vec<Decision>> {
        match checks {
            [one] if !one.charge => Some(vec![self.check_ready(one.key, one.policy, one.cost)?]),
            _ => self.inner.check_many_ready(checks),
        }
    }

    /// Refunds the client in the store, then drops this instance's cached denial of it, as
    /// [`reset`](Self::reset) does.
    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        let _forget = OnDrop(|| self.forget(policy, key));
        self.inner.refund(key, policy, n).await
    }

    fn clock(&self) -> Option<&dyn crate::clock::Clock> {
        self.inner.clock()
    }

    fn abandoned(&self) {
        self.inner.abandoned();
    }

    fn label(&self) -> Arc<str> {
        self.inner.label()
    }
}

/// Passed on: a client's new quota is another policy, whose requests no cached denial of the
/// old one answers.
impl<S: QuotaOverrides> QuotaOverrides for DenialCache<S> {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        self.inner.quota_override(rule, key).await
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.inner.set_quota_override(rule, key, quota, ttl).await
    }
}

/// A refusal for lack of a slot lasts until a request ends, not a known time: never cached.
impl<S: InFlightSlots> InFlightSlots for DenialCache<S> {
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        self.inner.take_slot(key, limit, id).await
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        self.inner.give_back_slot(key, limit, id).await
    }

    fn give_back_slot_now(&self, key: &str, limit: &InFlight, id: u64) -> bool {
        self.inner.give_back_slot_now(key, limit, id)
    }

    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        self.inner.renew_slots(slots).await
    }
}

impl<S: fmt::Debug> fmt::Debug for DenialCache<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenialCache")
            .field("inner", &self.inner)
            .field("capacity", &(self.per_shard * SHARDS))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::wrappers::tests::{remote, Remote};
    use crate::store::wrappers::Backend;
    use crate::store::MemoryStore;
    use crate::Algorithm;

    fn policy(quota: &str) -> Policy {
        Policy::new("p", quota.parse().unwrap(), Algorithm::Gcra).unwrap()
    }

    /// A reset whose caller hangs up mid-call (an admin request dropped) may have reset the
    /// client in the store: the cached denial goes either way.
    #[tokio::test]
    async fn a_reset_dropped_mid_call_still_drops_the_cached_denial() {
        let cache = DenialCache::new(Backend::of(Remote::with_hanging_reset()), 100);
        let policy = policy("1/min");
        assert!(cache.check("k", &policy, 1).await.unwrap().allowed);
        assert!(!cache.check("k", &policy, 1).await.unwrap().allowed);
        assert!(
            cache.check_ready("k", &policy, 1).is_some(),
            "denial cached"
        );
        let reset = tokio::time::timeout(Duration::from_millis(1), cache.reset("k", &policy));
        assert!(reset.await.is_err(), "the reset hangs");
        assert!(
            cache.check_ready("k", &policy, 1).is_none(),
            "no denial cached"
        );
    }

    #[tokio::test]
    async fn a_denied_key_is_answered_locally_with_the_remaining_wait() {
        let cache = DenialCache::new(MemoryStore::new(), 100);
        let policy = policy("2/min");
        for _ in 0..2 {
            assert!(cache.check("k", &policy, 1).await.unwrap().allowed);
        }
        let denied = cache.check("k", &policy, 1).await.unwrap();
        assert!(!denied.allowed);
        assert_eq!(cache.hits(), 0);
        let cached = cache.check("k", &policy, 1).await.unwrap();
        assert_eq!(cache.hits(), 1);
        assert!(!cached.allowed);
        assert_eq!(cached.remaining, 0);
        assert_eq!(cached.limit, denied.limit);
        let (was, now) = (denied.retry_after.unwrap(), cached.retry_after.unwrap());
        assert!(
            now <= was && was - now < Duration::from_millis(50),
            "{was:?} {now:?}"
        );
        // Another key, and a cheaper request than the one denied, still ask the store.
        assert!(cache.check("other", &policy, 1).await.unwrap().allowed);
        assert_eq!(cache.hits(), 1);
    }

    #[tokio::test]
    async fn a_cached_denial_is_answered_at_once_over_a_store_that_cannot_be() {
        let cache = DenialCache::new(remote(), 100);
        let policy = policy("1/min");
        assert!(cache.check_ready("k", &policy, 1).is_none());
        assert!(cache.check("k", &policy, 1).await.unwrap().allowed);
        assert!(cache.check_ready("k", &policy, 1).is_none());
        assert!(!cache.check("k", &policy, 1).await.unwrap().allowed);
        let ready = cache.check_ready("k", &policy, 1).unwrap();
        assert!(!ready.allowed);
        assert_eq!(ready.remaining, 0);
        assert!(ready.retry_after.unwrap() > Duration::from_secs(59));
        assert_eq!(cache.hits(), 1);
        assert!(cache.check_ready("other", &policy, 1).is_none());
    }

    #[test]
    fn a_denial_made_at_once_is_cached_too() {
        let cache = DenialCache::new(MemoryStore::new(), 100);
        let policy = policy("1/min");
        assert!(cache.check_ready("k", &policy, 1).unwrap().allowed);
        assert!(!cache.check_ready("k", &policy, 1).unwrap().allowed);
        assert_eq!(cache.hits(), 0);
        assert!(!cache.check_ready("k", &policy, 1).unwrap().allowed);
        assert_eq!(cache.hits(), 1);
    }

    #[tokio::test]
    async fn a_denial_answers_only_requests_that_cost_as_much_or_more() {
        let cache = DenialCache::new(MemoryStore::new(), 100);
        let policy = policy("10/min");
        assert!(cache.check("k", &policy, 8).await.unwrap().allowed);
        assert!(!cache.check("k", &policy, 5).await.unwrap().allowed);
        assert!(!cache.check("k", &policy, 6).await.unwrap().allowed);
        assert_eq!(cache.hits(), 1);
        // Cost 2 fits in what is left: the store is asked, and allows it.
        assert!(cache.check("k", &policy, 2).await.unwrap().allowed);
        assert_eq!(cache.hits(), 1);
    }

    #[tokio::test]
    async fn another_quota_under_the_same_name_is_not_answered() {
        let cache = DenialCache::new(MemoryStore::new(), 100);
        let strict = policy("1/min");
        assert!(cache.check("k", &strict, 1).await.unwrap().allowed);
        assert!(!cache.check("k", &strict, 1).await.unwrap().allowed);
        // A reload raised the quota: the old denial does not apply, the store decides.
        let generous = policy("100/min");
        cache.check("k", &generous, 1).await.unwrap();
        assert_eq!(cache.hits(), 0);
    }

    #[tokio::test]
    async fn a_cached_denial_answers_a_peek_and_a_peeked_denial_answers_a_check() {
        let cache = DenialCache::new(MemoryStore::new(), 100);
        let policy = policy("1/min");
        assert!(cache.peek("k", &policy, 1).await.unwrap().allowed);
        assert!(cache.check("k", &policy, 1).await.unwrap().allowed);
        let denied = cache.check("k", &policy, 1).await.unwrap();
        assert!(!denied.allowed && cache.hits() == 0);
        let peeked = cache.peek("k", &policy, 1).await.unwrap();
        assert!(!peeked.allowed);
        assert_eq!(cache.hits(), 1);
        // A denial found by a peek is cached too.
        let other = policy.clone();
        assert!(cache.check("j", &other, 1).await.unwrap().allowed);
        assert!(!cache.peek("j", &other, 1).await.unwrap().allowed);
        assert_eq!(cache.hits(), 1);
        assert!(!cache.check("j", &other, 1).await.unwrap().allowed);
        assert_eq!(cache.hits(), 2);
    }

    #[tokio::test]
    async fn a_reset_through_another_instance_reaches_this_cache_within_5_s() {
        let clock = crate::clock::ManualClock::new(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        let (here, there) = (
            DenialCache::new(store.clone(), 100),
            DenialCache::new(store, 100),
        );
        // Blocked for 15 minutes after a denial.
        let policy = policy("1/min").with_block_for(Duration::from_secs(900));
        assert!(here.check("k", &policy, 1).await.unwrap().allowed);
        assert!(!here.check("k", &policy, 1).await.unwrap().allowed);
        there.reset("k", &policy).await.unwrap();
        // Within 5 s this cache still answers the block, with its true Retry-After.
        clock.advance(Duration::from_micros(4_999_999));
        let cached = here.check("k", &policy, 1).await.unwrap();
        assert_eq!((cached.allowed, here.hits()), (false, 1));
        assert_eq!(cached.retry_after, Some(Duration::from_micros(895_000_001)));
        // Then it asks the store, which was reset.
        clock.advance(Duration::from_micros(1));
        assert!(here.check("k", &policy, 1).await.unwrap().allowed);
        assert_eq!(here.hits(), 1);
    }

    #[tokio::test]
    async fn after_every_denial_ended_a_new_denial_is_cached_again() {
        let clock = crate::clock::ManualClock::new(1_000_000);
        let cache = DenialCache::new(MemoryStore::with_clock(clock.clone()), 100);
        let policy = policy("1/min");
        assert!(cache.check("k", &policy, 1).await.unwrap().allowed);
        assert!(!cache.check("k", &policy, 1).await.unwrap().allowed);
        assert!(!cache.check("k", &policy, 1).await.unwrap().allowed);
        assert_eq!(cache.hits(), 1);
        // The denial has ended: the store allows, then denies again, and that denial answers.
        clock.advance(Duration::from_secs(60));
        assert!(cache.check("k", &policy, 1).await.unwrap().allowed);
        assert!(cache.check("other", &policy, 1).await.unwrap().allowed);
        assert!(!cache.check("k", &policy, 1).await.unwrap().allowed);
        assert_eq!(cache.hits(), 1);
        let cached = cache.check("k", &policy, 1).await.unwrap();
        assert_eq!(cache.hits(), 2);
        assert_eq!(cached.retry_after, Some(Duration::from_secs(60)));
    }

    #[tokio::test]
    async fn capacity_bounds_what_is_kept_and_zero_turns_it_off() {
        let cache = DenialCache::new(MemoryStore::new(), 32);
        let policy = policy("1/min");
        for i in 0..1_000 {
            let key = i.to_string();
            cache.check(&key, &policy, 1).await.unwrap();
            cache.check(&key, &policy, 1).await.unwrap();
        }
        let kept: usize = cache.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(kept <= 32, "{kept}");
        let off = DenialCache::new(MemoryStore::new(), 0);
        for _ in 0..3 {
            off.check("k", &policy, 1).await.unwrap();
        }
        assert_eq!(off.hits(), 0);
    }
}
