//! Plain counters ([`Policy::with_plain_counter`]) on Redis: envoyproxy/ratelimit's keys and
//! commands, so that its instances and tollgate's share each count.
//!
//! A counter is `<client key><start of the window, in Unix seconds>` (the reference's
//! `src/limiter/cache_key.go`: its client key is `<prefix><domain>_<key>_<value>_…`, which the
//! caller builds), an integer. Charging every hit, a request's counters are `INCRBY` by the
//! cost and `EXPIRE` by the period each, all in one pipeline (`src/redis/fixed_cache_impl.go`
//! lines 35-38 and 160-204); stopping when over the limit, they are read first with a `GET`
//! each, in a pipeline of their own, and a counter is then added its cost only if no counter
//! would pass its limit, or if it would itself (lines 89-160, `getHitsAddend` lines 44-72).
//! Each decision is made on the count `INCRBY` returns, so each limit is exact under any
//! concurrency. Anything else (a refused request that consumes nothing, plain counters stacked
//! with other algorithms) runs in the stacked script, on the same keys
//! (`lua/plain_counter.lua`).
//!
//! A store given a second store for one-second periods ([`RedisStore::per_second`]) keeps
//! those counters there, as the reference's `REDIS_PERSECOND` does.

use deadpool_redis::redis::aio::ConnectionLike;
use deadpool_redis::redis::{self, FromRedisValue, RedisResult, Value};

use super::on_connection::OnConnection;
use super::RedisStore;
use crate::algorithm::{window_start, State};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::check::Check;

/// A pipeline of plain commands, run in one round trip; its replies, but for the commands
/// marked ignored, in order.
pub(crate) struct Pipe(pub(crate) redis::Pipeline);

impl OnConnection for Pipe {
    type Output = Vec<Value>;

    fn run_on<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
    ) -> impl std::future::Future<Output = RedisResult<Vec<Value>>> + Send {
        self.0.query_async(connection)
    }
}

/// The key of `client_key`'s plain counter under `policy` in the window that holds `now`.
pub(crate) fn counter_key(client_key: &str, policy: &Policy, now: u64) -> String {
    policy.counter_key(client_key, now)
}

/// A counter's value as a number: nil is 0 (no counter yet).
fn count(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Nil => Ok(0),
        other => u64::from_redis_value_ref(other)
            .map_err(|e| StoreError::key_state(format!("a plain counter holds no count: {e}"))),
    }
}

impl RedisStore {
    /// The time plain counters are decided at, in µs: the store's clock's, else the system's
    /// (never Redis `TIME`: the window is part of the key, built here, as the reference
    /// builds it from its own clock).
    pub(super) fn counter_now(&self) -> u64 {
        match &self.clock {
            Some(clock) => clock.now(),
            None => SystemClock.now(),
        }
    }

    /// The store that keeps `policy`'s plain counters: the per-second store for a period of
    /// one second, when there is one; this one otherwise.
    pub(super) fn counters_of(&self, policy: &Policy) -> &RedisStore {
        match &self.per_second {
            Some(per_second) if policy.params().period == 1_000_000 && policy.plain_counter() => {
                per_second
            }
            _ => self,
        }
    }

    /// The keys of `checks` for one stacked script call, and the time it decides at: with a
    /// plain counter among them, [`counter_now`](Self::counter_now) (which its key was built
    /// with) for every check; else [`now_arg`](Self::now_arg).
    pub(super) fn keys_and_now(&self, checks: &[Check<'_>]) -> (Vec<String>, String) {
        let plain_now = (checks.iter())
            .any(|c| c.policy.plain_counter())
            .then(|| self.counter_now());
        let keys = (checks.iter())
            .map(|c| match plain_now {
                Some(now) if c.policy.plain_counter() => counter_key(c.key, c.policy, now),
                _ => self.state_key(c.policy, c.key),
            })
            .collect();
        let now = plain_now.map_or_else(|| self.now_arg(), |now| now.to_string());
        (keys, now)
    }

    /// Runs one command per key (`each` appends it, and whatever else it sends unreplied) in
    /// one pipeline, and returns each key's reply; on a cluster, one pipeline per hash slot,
    /// all at once.
    async fn per_key(
        &self,
        keys: &[String],
        each: impl Fn(&mut redis::Pipeline, usize),
    ) -> Result<Vec<Value>, StoreError> {
        #[cfg(feature = "cluster")]
        if self.shared.connection.is_cluster() && keys.len() > 1 {
            return super::cluster::per_slot(self, keys, each).await;
        }
        let mut pipe = redis::pipe();
        for i in 0..keys.len() {
            each(&mut pipe, i);
        }
        let replies = self.pipeline(pipe).await?;
        match replies.len() == keys.len() {
            true => Ok(replies),
            false => Err(StoreError::backend(format!(
                "a pipeline of {} keys got {} replies",
                keys.len(),
                replies.len()
            ))),
        }
    }

    /// Runs `pipe` in one round trip.
    pub(super) async fn pipeline(&self, pipe: redis::Pipeline) -> Result<Vec<Value>, StoreError> {
        Box::pin(self.shared.connection.run(Pipe(pipe))).await
    }
}

/// One plain counter of a request.
struct Counter<'a> {
    check: &'a Check<'a>,
    key: String,
}

/// The plain counters of `checks`, charged: every hit (`stop` false) or stopping when over
/// the limit (`stop`), as the reference charges them (see the module's docs). Every check is
/// a plain counter that is charged.
pub(super) async fn charge(
    store: &RedisStore,
    checks: &[Check<'_>],
    stop: bool,
) -> Result<Vec<Decision>, StoreError> {
    let now = store.counter_now();
    let counters: Vec<Counter<'_>> = (checks.iter())
        .map(|check| Counter {
            key: counter_key(check.key, check.policy, now),
            check,
        })
        .collect();
    let mut adds: Vec<u64> = checks.iter().map(|c| u64::from(c.cost)).collect();
    if stop {
        let read = on_each(store, &counters, |pipe, c, _| {
            pipe.get(&c.key);
        })
        .await?;
        // `isOverLimitThresholdReached`: the count after the hits would pass the limit.
        let over: Vec<bool> = (counters.iter().zip(&read))
            .map(|(c, &count)| count + u64::from(c.check.cost) > c.check.policy.params().limit)
            .collect();
        if over.contains(&true) {
            for (add, over) in adds.iter_mut().zip(&over) {
                if !over {
                    *add = 0;
                }
            }
        }
    }
    let after = on_each(store, &counters, |pipe, c, i| {
        let seconds = c.check.policy.params().period / 1_000_000;
        pipe.incr(&c.key, adds[i]);
        pipe.expire(&c.key, i64::try_from(seconds).unwrap_or(i64::MAX))
            .ignore();
    })
    .await?;
    Ok((counters.iter().zip(after).zip(adds))
        .map(|((c, after), added)| {
            let p = c.check.policy.params();
            let before = after.saturating_sub(added);
            State::fixed_window(window_start(p, now), before).check(p, now, u64::from(c.check.cost))
        })
        .collect())
}

/// Runs `each` for every counter, in one pipeline per store that keeps some (at once), and
/// returns each counter's count from its first reply.
async fn on_each(
    store: &RedisStore,
    counters: &[Counter<'_>],
    each: impl Fn(&mut redis::Pipeline, &Counter<'_>, usize) + Copy,
) -> Result<Vec<u64>, StoreError> {
    let (fast, main): (Vec<usize>, Vec<usize>) = (0..counters.len())
        .partition(|&i| !std::ptr::eq(store.counters_of(counters[i].check.policy), store));
    let run = |target: &'_ RedisStore, indexes: &'_ [usize]| {
        let keys: Vec<String> = indexes.iter().map(|&i| counters[i].key.clone()).collect();
        let indexes = indexes.to_vec();
        let target = target.clone();
        async move {
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let each = |pipe: &mut redis::Pipeline, j: usize| {
                let i = indexes[j];
                each(pipe, &counters[i], i);
            };
            target.per_key(&keys, each).await
        }
    };
    let per_second = store.per_second.as_deref().unwrap_or(store);
    let (fast_replies, main_replies) = tokio::try_join!(run(per_second, &fast), run(store, &main))?;
    let mut counts = vec![0; counters.len()];
    for (&i, reply) in (fast.iter().zip(&fast_replies)).chain(main.iter().zip(&main_replies)) {
        counts[i] = count(reply)?;
    }
    Ok(counts)
}

/// Decides `checks`, some of them plain counters, as [`StoreExt::check_many`] does, in the
/// fewest calls that keep each mode's promise:
///
/// - no check blocks another (every hit charged): the plain counters are charged in their
///   pipelines and the others decided in one script call, all at once;
/// - every check is a charged plain counter that stops the others when over its limit, each
///   counter named once: the reference's two pipelines ([`charge`]);
/// - else, all in one stacked script call, on one store; checks kept in two stores (the
///   per-second store's plain counters and the others) are one call on each, at once, so the
///   all-or-nothing holds within each store, and each limit stays exact.
///
/// [`StoreExt::check_many`]: crate::store::contract::StoreExt::check_many
pub(super) async fn check_many(
    store: &RedisStore,
    checks: &[Check<'_>],
) -> Result<Vec<Decision>, StoreError> {
    let every_hit = checks.iter().all(|c| c.charge && !c.blocking);
    let plain = |c: &Check<'_>| c.policy.plain_counter();
    if every_hit {
        let (counters, others) = split(checks, plain);
        let (charged, decided) =
            tokio::try_join!(charge(store, &counters.1, false), store.scripted(&others.1))?;
        return Ok(merge(
            checks.len(),
            [(counters.0, charged), (others.0, decided)],
        ));
    }
    // The same counter twice is decided in order, the second seeing what the first would
    // take: one atomic step, below.
    let repeated = (checks.iter().enumerate()).any(|(i, c)| {
        checks[..i]
            .iter()
            .any(|d| d.key == c.key && d.policy == c.policy)
    });
    if !repeated && checks.iter().all(|c| plain(c) && c.charge && c.blocking) {
        return charge(store, checks, true).await;
    }
    let (fast, main) = split(checks, |c| {
        !std::ptr::eq(store.counters_of(c.policy), store)
    });
    let Some(per_second) = store.per_second.as_deref().filter(|_| !fast.0.is_empty()) else {
        return atomic(store, checks).await;
    };
    let (fast_decided, main_decided) =
        tokio::try_join!(atomic(per_second, &fast.1), atomic(store, &main.1))?;
    Ok(merge(
        checks.len(),
        [(fast.0, fast_decided), (main.0, main_decided)],
    ))
}

/// `checks` decided in one atomic step on `store`: plain counters alone (of distinct keys,
/// none charged while over, on one Redis, not a cluster's slots) by `lua/plain_counters.lua`,
/// one `MGET` and a `SET` per counter that counts; anything else by the stacked script.
async fn atomic(store: &RedisStore, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
    #[cfg(feature = "cluster")]
    let cluster = store.shared.connection.is_cluster();
    #[cfg(not(feature = "cluster"))]
    let cluster = false;
    let alone = checks.len() > 1
        && !cluster
        && (checks.iter()).all(|c| c.policy.plain_counter() && !c.charge);
    if !alone {
        return store.scripted(checks).await;
    }
    let now = store.counter_now();
    let keys: Vec<String> = (checks.iter())
        .map(|c| counter_key(c.key, c.policy, now))
        .collect();
    let distinct = (keys.iter().enumerate()).all(|(i, k)| !keys[..i].contains(k));
    if !distinct {
        return store.scripted(checks).await;
    }
    let reply = store
        .eval(store.scripts().plain_together(&keys, checks, now))
        .await?;
    super::reply::decisions_from_reply(checks, &reply)
}

/// The indexes and copies of the checks that `which` picks, and of the others.
type Part<'a> = (Vec<usize>, Vec<Check<'a>>);

fn split<'a>(checks: &[Check<'a>], which: impl Fn(&Check<'a>) -> bool) -> (Part<'a>, Part<'a>) {
    let (mut picked, mut others): (Part<'a>, Part<'a>) = Default::default();
    for (i, c) in checks.iter().enumerate() {
        let part = if which(c) { &mut picked } else { &mut others };
        part.0.push(i);
        part.1.push(*c);
    }
    (picked, others)
}

/// The decisions of two parts put back in the checks' order.
fn merge(n: usize, parts: [(Vec<usize>, Vec<Decision>); 2]) -> Vec<Decision> {
    let mut decisions: Vec<Option<Decision>> = vec![None; n];
    for (indexes, decided) in parts {
        for (i, d) in indexes.into_iter().zip(decided) {
            decisions[i] = Some(d);
        }
    }
    decisions.into_iter().flatten().collect()
}
