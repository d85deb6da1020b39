//! [`LookupCache`]: answers looked up by key (a client's quota from a database, a quota set
//! for it in the store), kept for a while, and looked up once at a time per key.
//!
//! Concurrent first requests for one key make one lookup: the first is its *leader* and runs
//! it, the others *wait* for its answer ([`Found`]). A lookup that is never finished (its
//! leader was dropped) wakes its waiters with nothing and frees the key for the next request.
//! The number of answers kept is bounded: a full shard drops an expired answer if it meets one
//! among the first few it looks at, else any answer it holds; lookups under way are never
//! dropped.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use foldhash::quality::RandomState;
use tokio::sync::watch;

use crate::clock::monotonic_micros;

const SHARDS: usize = 16;

/// How many answers a full shard looks at for an expired one to drop before dropping any.
const EVICTION_LOOK: usize = 8;

/// One shard's keys and what is kept for each.
type Shard<V> = HashMap<Box<str>, Slot<V>, RandomState>;

/// Answers of type `V` by key, each kept until its own expiry.
pub(crate) struct LookupCache<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    /// Answers kept at most per shard.
    per_shard: usize,
    hasher: RandomState,
}

enum Slot<V> {
    /// An answer, until then (µs of the monotonic clock).
    Ready { value: V, until: u64 },
    /// A lookup under way: its answer is sent here.
    Flying(watch::Sender<Option<V>>),
}

/// What the cache holds for a key.
pub(crate) enum Found<V> {
    /// An answer: no lookup needed.
    Ready(V),
    /// Another request's lookup is under way: its answer comes by the waiter.
    Waiting(Waiter<V>),
    /// Nothing: this request looks the key up, and gives the answer to the leader.
    Leading(Leader<V>),
}

/// Waits for the answer of a lookup under way.
pub(crate) struct Waiter<V>(watch::Receiver<Option<V>>);

/// The one lookup under way for a key: [`finish`](Self::finish) keeps and sends its answer;
/// dropped unfinished, it frees the key and wakes the waiters with nothing.
pub(crate) struct Leader<V> {
    cache: Arc<LookupCache<V>>,
    key: Box<str>,
    sender: Option<watch::Sender<Option<V>>>,
}

impl<V: Clone + Send + Sync + 'static> LookupCache<V> {
    /// A cache keeping about `capacity` answers at most (at least one per shard).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            hasher: RandomState::default(),
        }
    }

    /// The answer kept for `key`, if it has not expired.
    pub(crate) fn ready(&self, key: &str) -> Option<V> {
        match self.shard_of(key).get(key) {
            Some(Slot::Ready { value, until }) if *until > monotonic_micros() => {
                Some(value.clone())
            }
            _ => None,
        }
    }

    /// The answer for `key`, the lookup under way to wait for, or the lead of a new one.
    pub(crate) fn find(self: &Arc<Self>, key: &str) -> Found<V> {
        let now = monotonic_micros();
        let mut shard = self.shard_of(key);
        match shard.get(key) {
            Some(Slot::Ready { value, until }) if *until > now => {
                return Found::Ready(value.clone())
            }
            Some(Slot::Flying(sender)) => return Found::Waiting(Waiter(sender.subscribe())),
            _ => {}
        }
        if shard.len() >= self.per_shard && !shard.contains_key(key) {
            // Room for one more, in constant time (a flood of new keys must not scan): an
            // expired answer among the first few, else the first answer met.
            let answers = (shard.iter())
                .filter_map(|(key, slot)| match slot {
                    Slot::Ready { until, .. } => Some((key, *until <= now)),
                    Slot::Flying(_) => None,
                })
                .take(EVICTION_LOOK);
            let mut victim = None;
            for (key, expired) in answers {
                if victim.is_none() || expired {
                    victim = Some(key.clone());
                }
                if expired {
                    break;
                }
            }
            if let Some(victim) = victim {
                shard.remove(&victim);
            }
        }
        let (sender, _) = watch::channel(None);
        shard.insert(key.into(), Slot::Flying(sender.clone()));
        Found::Leading(Leader {
            cache: Arc::clone(self),
            key: key.into(),
            sender: Some(sender),
        })
    }

    /// Keeps `value` as `key`'s answer for `ttl`, replacing whatever is there (a lookup
    /// under way is told the value too).
    pub(crate) fn put(&self, key: &str, value: V, ttl: Duration) {
        let until = monotonic_micros().saturating_add(micros(ttl));
        let mut shard = self.shard_of(key);
        if let Some(Slot::Flying(sender)) = shard.get(key) {
            sender.send_replace(Some(value.clone()));
        }
        shard.insert(key.into(), Slot::Ready { value, until });
    }

    /// How many keys have an answer or a lookup under way.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.len()))
            .sum()
    }
}

impl<V: Clone> Waiter<V> {
    /// The answer, or `None` when its lookup was dropped unfinished, or `limit` passed first.
    pub(crate) async fn answer(self, limit: Duration) -> Option<V> {
        self.answer_by(tokio::time::Instant::now() + limit).await
    }

    /// The answer, or `None` when its lookup was dropped unfinished, or `deadline` came first.
    pub(crate) async fn answer_by(mut self, deadline: tokio::time::Instant) -> Option<V> {
        let wait = self.0.wait_for(Option::is_some);
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(Ok(answer)) => answer.clone(),
            _ => None,
        }
    }
}

impl<V: Clone> Leader<V> {
    /// A waiter for this lookup's answer (for the request that leads it).
    pub(crate) fn waiter(&self) -> Option<Waiter<V>> {
        self.sender
            .as_ref()
            .map(|sender| Waiter(sender.subscribe()))
    }

    /// Keeps `value` for `ttl` (not at all when zero) and gives it to every waiter.
    pub(crate) fn finish(mut self, value: V, ttl: Duration) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        let until = monotonic_micros().saturating_add(micros(ttl));
        {
            let mut shard = self.cache.shard_of(&self.key);
            let ours =
                matches!(shard.get(&self.key), Some(Slot::Flying(s)) if s.same_channel(&sender));
            if ours {
                match ttl.is_zero() {
                    true => shard.remove(&self.key),
                    false => shard.insert(
                        self.key.clone(),
                        Slot::Ready {
                            value: value.clone(),
                            until,
                        },
                    ),
                };
            }
        }
        sender.send_replace(Some(value));
    }
}

impl<V> LookupCache<V> {
    fn shard_of(&self, key: &str) -> MutexGuard<'_, Shard<V>> {
        let index = self.hasher.hash_one(key) as usize % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl<V> Drop for Leader<V> {
    /// Unfinished: the key is freed for the next request; the waiters get nothing (the
    /// sender is dropped with this).
    fn drop(&mut self) {
        let Some(sender) = self.sender.take() else {
            return;
        };
        let mut shard = self.cache.shard_of(&self.key);
        if matches!(shard.get(&self.key), Some(Slot::Flying(s)) if s.same_channel(&sender)) {
            shard.remove(&self.key);
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_lookup_at_a_time_per_key_and_its_answer_for_everyone() {
        let cache = Arc::new(LookupCache::<u32>::new(100));
        let Found::Leading(leader) = cache.find("k") else {
            panic!("the first request leads");
        };
        let waiters: Vec<_> = (0..10)
            .map(|_| match cache.find("k") {
                Found::Waiting(waiter) => waiter,
                _ => panic!("the others wait"),
            })
            .collect();
        leader.finish(7, Duration::from_secs(60));
        for waiter in waiters {
            assert_eq!(waiter.answer(Duration::from_secs(1)).await, Some(7));
        }
        assert!(matches!(cache.find("k"), Found::Ready(7)));
        assert_eq!(cache.ready("k"), Some(7));
    }

    #[tokio::test]
    async fn a_dropped_lookup_frees_its_key_and_wakes_its_waiters_with_nothing() {
        let cache = Arc::new(LookupCache::<u32>::new(100));
        let Found::Leading(leader) = cache.find("k") else {
            panic!("the first request leads");
        };
        let Found::Waiting(waiter) = cache.find("k") else {
            panic!("the second waits");
        };
        drop(leader);
        assert_eq!(waiter.answer(Duration::from_secs(1)).await, None);
        assert!(matches!(cache.find("k"), Found::Leading(_)));
    }

    #[tokio::test]
    async fn answers_expire_and_their_number_is_bounded() {
        let cache = Arc::new(LookupCache::<u32>::new(SHARDS));
        for i in 0..1_000 {
            if let Found::Leading(leader) = cache.find(&format!("k{i}")) {
                leader.finish(i, Duration::from_secs(60));
            }
        }
        assert!(cache.len() <= 2 * SHARDS, "{}", cache.len());
        cache.put("short", 1, Duration::from_micros(1));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(cache.ready("short"), None);
        let Found::Leading(leader) = cache.find("none") else {
            panic!("leads");
        };
        leader.finish(3, Duration::ZERO);
        assert_eq!(cache.ready("none"), None);
    }
}
