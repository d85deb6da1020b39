//! Leases for hot keys against a real redis-server, over real HTTP: never more than the quota,
//! not much less, a few Redis calls per thousand requests; and without the store's atomic
//! lease, too much.

use super::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::rules::Rule;
use crate::store::check::Check;
use crate::store::contract::{InFlightSlots, Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::slot::HeldSlot;
use crate::store::wrappers::user_store::check_in_order;
use crate::store::wrappers::Backend;
use crate::store::InFlight;
use crate::store::{MemoryStore, RedisStore, Store};
use crate::{
    clock::ManualClock,
    key,
    rules::Lease,
    store::{Decision, Policy, StoreError},
    Algorithm, Quota, RateLimitLayer,
};
use axum::routing::get;
use axum::Router;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Seeded histories of leases, returns, checks and blocks: the memory store and the Redis
/// store (on the same manual clock) answer every step alike, for every algorithm that leases.
#[tokio::test]
async fn memory_and_redis_lease_and_return_alike() {
    let url = support::shared_redis_url();
    let clock = ManualClock::new(0);
    for algorithm in Lease::ALGORITHMS {
        let seed = 0x1ea5e ^ (algorithm as u64);
        let mut rng = SmallRng::seed_from_u64(seed);
        let redis = RedisStore::from_url(&url)
            .unwrap()
            .prefix(support::unique_prefix("leases"))
            .with_clock(clock.clone());
        let memory = MemoryStore::with_clock(clock.clone());
        let quota = Quota::new(20, Duration::from_secs(2)).unwrap();
        let policy = Policy::new("p", quota, algorithm).unwrap();
        let period = 2_000_000u64;
        let start = Instant::now();
        let mut offset: u64 = 1_700_000_000_000_000;
        let mut grants: Vec<Grant> = Vec::new();
        for step in 0..400 {
            offset += match rng.random_range(0..10) {
                0..=6 => rng.random_range(0..period / 40 + 1),
                7..=8 => rng.random_range(0..period / 4 + 1),
                _ => rng.random_range(0..2 * period),
            };
            // Manual time runs ahead of real time, so Redis never expires a key early.
            clock.set(offset + start.elapsed().as_micros() as u64);
            let at = format!("{algorithm} seed {seed:#x} step {step}");
            match rng.random_range(0..7) {
                // Now and then a block: a blocked key leases nothing and takes nothing back.
                6 => {
                    let blocked_for = Duration::from_micros(rng.random_range(1..period));
                    memory.block("k", &policy, blocked_for).await.unwrap();
                    redis.block("k", &policy, blocked_for).await.unwrap();
                }
                0..=1 => {
                    let min = rng.random_range(1..4);
                    let max = min + rng.random_range(0..12);
                    let m = memory.acquire("k", &policy, min, max).await.unwrap();
                    let r = redis.acquire("k", &policy, min, max).await.unwrap();
                    assert_eq!(m, r, "{at}");
                    if m.granted > 0 {
                        grants.push(m);
                    }
                }
                2..=3 if !grants.is_empty() => {
                    let grant = grants.remove(rng.random_range(0..grants.len()));
                    let unused = rng.random_range(0..=grant.granted);
                    let m = memory.release("k", &policy, unused, &grant).await.unwrap();
                    let r = redis.release("k", &policy, unused, &grant).await.unwrap();
                    assert_eq!(m, r, "{at}");
                }
                _ => {
                    let m = memory.check("k", &policy, 1).await.unwrap();
                    let r = redis.check("k", &policy, 1).await.unwrap();
                    assert_eq!(m, r, "{at}");
                }
            }
        }
    }
}

#[tokio::test]
async fn the_redis_store_leases_every_algorithm_that_leases() {
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("every"));
    leases_are_exact(&store, "k").await;
}

/// The example of the leases module's docs (`store::wrappers::leases`), on Redis: a lease of
/// 10 at 0, 1 unit from elsewhere at 20T, and a return of 5 at 20T leave TAT = 21T.
#[tokio::test]
async fn a_return_on_redis_never_erases_later_consumption() {
    let url = support::shared_redis_url();
    let t0 = 1_800_000_000_000_000;
    let clock = ManualClock::new(t0);
    let redis = RedisStore::from_url(&url)
        .unwrap()
        .prefix(support::unique_prefix("design"))
        .with_clock(clock.clone());
    // T = 100 ms.
    let policy = Policy::new(
        "p",
        Quota::per_second(10).unwrap().burst(20).unwrap(),
        Algorithm::Gcra,
    )
    .unwrap();
    let grant = redis.acquire("k", &policy, 1, 10).await.unwrap();
    assert_eq!((grant.granted, grant.mark), (10, t0 + 1_000_000));
    clock.set(t0 + 2_000_000);
    assert!(redis.check("k", &policy, 1).await.unwrap().allowed);
    assert_eq!(redis.release("k", &policy, 5, &grant).await.unwrap(), 0);
    let mut conn = support::redis_connection(&url);
    let tat: u64 = deadpool_redis::redis::cmd("GET")
        .arg(redis.state_key(&policy, "k"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(tat, t0 + 2_100_000);
}

/// What one run of traffic gave.
#[derive(Debug, Default)]
struct Run {
    allowed: u64,
    denied: u64,
    other: u64,
    seconds: f64,
}

/// An app limited globally at `per_second` with `Lease::Auto`, on `store`.
async fn app(store: Backend, per_second: u32) -> SocketAddr {
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::new("global", Quota::per_second(per_second).unwrap())
                .key(key::Global)
                .lease(Lease::Auto),
        )
        .backend(store)
        // Not about timeouts: a loaded machine must not make a request fail open.
        .store_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    support::serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await
}

/// Sends requests to both apps from 16 connections each for `seconds`.
async fn load(apps: [SocketAddr; 2], seconds: f64) -> Run {
    let counts: Arc<[AtomicU64; 3]> = Arc::default();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut workers = Vec::new();
    for addr in apps {
        let client = support::client();
        for _ in 0..16 {
            let (client, counts) = (client.clone(), Arc::clone(&counts));
            workers.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    let status = client
                        .get(format!("http://{addr}/"))
                        .send()
                        .await
                        .map_or(0, |r| r.status().as_u16());
                    let slot = match status {
                        200 => 0,
                        429 => 1,
                        _ => 2,
                    };
                    counts[slot].fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for worker in workers {
        worker.await.unwrap();
    }
    Run {
        allowed: counts[0].load(Ordering::Relaxed),
        denied: counts[1].load(Ordering::Relaxed),
        other: counts[2].load(Ordering::Relaxed),
        seconds: start.elapsed().as_secs_f64(),
    }
}

const PER_SECOND: u32 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_stay_within_the_quota_with_few_redis_calls() {
    let server = support::RedisServer::start();
    let apps = [
        app(
            Backend::of(RedisStore::from_url(&server.url()).unwrap()),
            PER_SECOND,
        )
        .await,
        app(
            Backend::of(RedisStore::from_url(&server.url()).unwrap()),
            PER_SECOND,
        )
        .await,
    ];
    let run = load(apps, 3.0).await;
    let quota = f64::from(PER_SECOND);
    // Over the run: at most the quota per second plus one burst, always.
    assert!(run.allowed as f64 <= quota * run.seconds + quota, "{run:?}");
    // Under-admission stays within what outstanding leases hold back.
    assert!(
        run.allowed as f64 >= 0.9 * quota * (run.seconds - 0.5),
        "{run:?}"
    );
    assert_eq!(run.other, 0, "{run:?}");
    assert!(
        run.denied > run.allowed,
        "the load must be above the quota: {run:?}"
    );
    let mut conn = support::redis_connection(&server.url());
    let calls =
        support::command_calls(&mut conn, "evalsha") + support::command_calls(&mut conn, "eval");
    let requests = run.allowed + run.denied;
    let per_request = calls as f64 / requests as f64;
    eprintln!("{run:?}: {calls} Redis calls, {per_request:.4} per request");
    assert!(per_request <= 0.05, "{calls} Redis calls for {run:?}");
}

/// A lease done as GET, then SET, as two commands: two instances read the same state, and
/// each writes over the other's lease.
#[derive(Debug, Clone)]
struct NotAtomic {
    redis: RedisStore,
    /// The pool under `redis`, for its own commands.
    pool: deadpool_redis::Pool,
}

impl Store for NotAtomic {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.redis.check(key, policy, cost).await
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.redis.peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.redis.reset(key, policy).await
    }

    async fn block(&self, key: &str, policy: &Policy, for_: Duration) -> Result<(), StoreError> {
        self.redis.block(key, policy, for_).await
    }
}

/// Its own lease, in place of the store's atomic one.
impl StoreExt for NotAtomic {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        check_in_order(self, checks).await
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
        "not_atomic".into()
    }
}

/// The Redis store's own.
impl QuotaOverrides for NotAtomic {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        self.redis.quota_override(rule, key).await
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.redis.set_quota_override(rule, key, quota, ttl).await
    }
}

/// The Redis store's slots.
impl InFlightSlots for NotAtomic {
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        self.redis.take_slot(key, limit, id).await
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        self.redis.give_back_slot(key, limit, id).await
    }

    fn give_back_slot_now(&self, key: &str, limit: &InFlight, id: u64) -> bool {
        self.redis.give_back_slot_now(key, limit, id)
    }

    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        self.redis.renew_slots(slots).await
    }
}

impl Leasing for NotAtomic {
    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        use deadpool_redis::redis::AsyncCommands;
        let state_key = self.redis.state_key(policy, key);
        let mut conn = self.pool.get().await.map_err(StoreError::backend)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let tat: Option<u64> = conn.get(&state_key).await.map_err(StoreError::backend)?;
        let t = policy.quota().period().as_micros() as u64 / u64::from(policy.quota().limit());
        let capacity = u64::from(policy.quota().capacity()) * t;
        let backlog = tat.unwrap_or(0).saturating_sub(now);
        let fit = capacity.saturating_sub(backlog) / t;
        let granted = fit.min(u64::from(max));
        let limit = u64::from(policy.quota().capacity());
        if granted < u64::from(min) {
            let retry = Duration::from_micros(backlog + u64::from(min) * t - capacity);
            let reset = Duration::from_micros(backlog);
            return Ok(Grant::new(
                0,
                Decision::denied(limit, fit, reset, Some(retry)),
                0,
            ));
        }
        // The other instance reads the same state meanwhile.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let after = backlog + granted * t;
        let _: () = conn
            .set(&state_key, now + after)
            .await
            .map_err(StoreError::backend)?;
        let decision = Decision::allowed(limit, fit - granted, Duration::from_micros(after));
        Ok(Grant::new(granted as u32, decision, now + after))
    }

    async fn release(&self, _: &str, _: &Policy, _: u32, _: &Grant) -> Result<u32, StoreError> {
        Ok(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_stores_atomic_lease_two_instances_admit_too_much() {
    let server = support::RedisServer::start();
    let store = || {
        let pool = deadpool_redis::Config::from_url(server.url())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))
            .unwrap();
        NotAtomic {
            redis: RedisStore::from_pool(pool.clone()),
            pool,
        }
    };
    let apps = [
        app(Backend::custom(store()), PER_SECOND).await,
        app(Backend::custom(store()), PER_SECOND).await,
    ];
    let run = load(apps, 3.0).await;
    eprintln!("not atomic: {run:?}");
    let quota = f64::from(PER_SECOND);
    assert!(
        run.allowed as f64 > quota * run.seconds + quota,
        "a lease that is not atomic should have admitted more than the quota: {run:?}"
    );
}

/// Leases of `key` at 5 per minute under every algorithm that leases, on `store`: 3 units,
/// then 2, then none (a denial with its wait); 2 unused units given back are leased again.
pub(super) async fn leases_are_exact(store: &impl Leasing, key: &str) {
    for algorithm in Lease::ALGORITHMS {
        let policy = Policy::new("leased", Quota::per_minute(5).unwrap(), algorithm).unwrap();
        let first = store.acquire(key, &policy, 1, 3).await.unwrap();
        let second = store.acquire(key, &policy, 1, 3).await.unwrap();
        let none = store.acquire(key, &policy, 1, 3).await.unwrap();
        let at = format!("{algorithm} on {key}");
        assert_eq!(
            (first.granted, second.granted, none.granted),
            (3, 2, 0),
            "{at}"
        );
        assert!(none.decision.retry_after.is_some(), "{at}");
        assert_eq!(
            store.release(key, &policy, 2, &second).await.unwrap(),
            2,
            "{at}"
        );
        let again = store.acquire(key, &policy, 1, 3).await.unwrap();
        assert_eq!(again.granted, 2, "{at}");
    }
}
