//! [`PlainCounters`]: plain counters ([`Policy::with_plain_counter`]) on memcached, in
//! envoyproxy/ratelimit's keys and with its increment-or-add, so that its instances and
//! tollgate's share each count.
//!
//! A counter is `<client key><start of the window, in Unix seconds>` (the reference's
//! `src/limiter/cache_key.go`), a decimal integer. The reference adds a request's hits with
//! `incr`, and on a miss `add`s the counter at the hits, to live one unit (an `incr` again if
//! another instance added it first: `src/memcached/cache_impl.go` lines 153-192); here one
//! meta arithmetic command does the same (`ma` creating the counter at the hits when it has
//! none), and the decision is made on the count it returns, so each limit is exact. A request
//! the limit refuses gives its cost back only when it is not charged (a refused request that
//! consumes nothing); charging every hit, as the reference does, it stays counted.
//!
//! Keys are taken as the reference's client (gomemcache) takes them; one it refuses (over 250
//! bytes, or with a space or a control byte) is digested instead (`#` and its SHA-256, see
//! `servers::memcached_key`), so it is counted apart from the reference's, which fails on it.

use std::time::Duration;

use super::servers::Servers;
use crate::algorithm::{window_start, State};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::contract::now_us;
use crate::store::grant::Grant;
use crate::store::state::StateBackedStore;

/// The plain-counter decisions of a memcached store, on its servers, by its clock.
pub(super) struct PlainCounters<'a> {
    pub(super) servers: &'a Servers,
    pub(super) state: &'a StateBackedStore,
}

/// Where one client's counter is at one instant.
struct At {
    counter: String,
    now: u64,
    start: u64,
}

impl PlainCounters<'_> {
    fn at(&self, key: &str, policy: &Policy) -> At {
        let now = now_us(self.state);
        At {
            counter: policy.counter_key(key, now),
            start: window_start(policy.params(), now),
            now,
        }
    }

    /// Decides a request of `cost`: the counter is added `cost` (created at `cost` to live one
    /// period if it has none), and the decision made on what it counted before; a denial
    /// gives the cost back unless it is `charge`d.
    pub(super) async fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
        charge: bool,
    ) -> Result<Decision, StoreError> {
        let at = self.at(key, policy);
        let p = policy.params();
        let cost = u64::from(cost.max(1));
        let ttl = Duration::from_micros(p.period);
        let after = self.servers.increment(&at.counter, cost, ttl).await?;
        let before = after.saturating_sub(cost);
        let decision = State::fixed_window(at.start, before).check(p, at.now, cost);
        if !decision.allowed && !charge {
            self.servers.decrement(&at.counter, cost).await?;
        }
        Ok(decision)
    }

    /// The decision a request of `cost` would get now (0: a look), counting nothing.
    pub(super) async fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let at = self.at(key, policy);
        let p = policy.params();
        let count = self.servers.counter(&at.counter).await?;
        let mut state = State::fixed_window(at.start, count.map_or(0, |(count, _)| count));
        Ok(match cost {
            0 => state.look(p, at.now),
            cost => state.check(p, at.now, u64::from(cost)),
        })
    }

    /// Forgets the window's count.
    pub(super) async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        use crate::store::state::StateStore;
        self.servers.delete(&self.at(key, policy).counter).await
    }

    /// Takes `n` off the window's count (memcached stops at 0).
    pub(super) async fn refund(
        &self,
        key: &str,
        policy: &Policy,
        n: u32,
    ) -> Result<(), StoreError> {
        let at = self.at(key, policy);
        self.servers.decrement(&at.counter, u64::from(n)).await
    }

    /// A plain counter is not leased: `min` units decided as one request.
    pub(super) async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
    ) -> Result<Grant, StoreError> {
        let decision = self.check(key, policy, min, false).await?;
        let granted = if decision.allowed { min } else { 0 };
        Ok(Grant::new(granted, decision, 0))
    }
}
