//! [`FixedWindowCounters`]: the aligned fixed window on memcached's own arithmetic: a plain
//! counter per client per window, added to in one step, as the reference counts.
//!
//! A decision adds its cost to the counter of the window that holds the store's `now`
//! (creating it, to live until the window ends, if it is the window's first) and decides on
//! the count it gets back, as [`MemoryStore`](crate::store::MemoryStore) decides on its own
//! count: allowed iff it stays within the limit. A refused request gives its cost back
//! (unless it is charged while over, as `rls` charges every hit), so it counts against no
//! later one. Nothing is read first and nothing is compared-and-set: decisions on one key,
//! from any number of instances, never wait for each other.
//!
//! Blocks (`Store::block`, `Policy::with_block_for`) stay at the client's state key, written
//! through the state store; every decision reads it alongside its addition. A block forgets
//! the window's count, as the memory store forgets the state of a client it blocks.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::servers::Servers;
use crate::algorithm::{self, window_start, Params, Saved, State};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::block_after;
use crate::store::contract::now_us;
use crate::store::grant::Grant;
use crate::store::state::{StateBackedStore, StateStore, MAX_ATTEMPTS};
use crate::store::Store;

/// The longest what a decision owes its counter may take once nobody waits for it.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// The fixed-window decisions of a memcached store, on its servers, with its blocks kept by
/// its state-backed decisions.
pub(super) struct FixedWindowCounters<'a> {
    pub(super) servers: &'a Arc<Servers>,
    pub(super) state: &'a StateBackedStore,
}

/// Where one client's fixed window lives at one instant.
struct At {
    /// The client's state key: its block, if it has one.
    block: String,
    /// The counter of the window that holds `now`.
    counter: String,
    /// That window's start (µs).
    start: u64,
    now: u64,
    p: Params,
}

impl At {
    /// How long the counter must live: until its window ends (memcached adds its margin).
    fn ttl(&self) -> Duration {
        let end = self.start.saturating_add(self.p.period.max(1));
        Duration::from_micros(end.saturating_sub(self.now).max(1))
    }
}

/// The counter of the window opening at `start` for the client `key`, whose state key is
/// `head` (`<prefix>:<policy>:fixed_window:`) followed by `key`:
/// `<prefix>:<policy>:fixed_window@<start>:<key>`. Policy names hold no `:` or `@`, so no
/// counter is ever a state key.
pub(super) fn counter_key(head: &str, start: u64, key: &str) -> String {
    let head = head.strip_suffix(':').unwrap_or(head);
    format!("{head}@{start}:{key}")
}

impl FixedWindowCounters<'_> {
    fn at(&self, key: &str, policy: &Policy, now: u64, start: Option<u64>) -> At {
        let p = *policy.params();
        let block = self.state.state_key(key, policy);
        let start = start.unwrap_or_else(|| window_start(&p, now));
        let head = block.strip_suffix(key).unwrap_or(&block);
        let counter = counter_key(head, start, key);
        At {
            block,
            counter,
            start,
            now,
            p,
        }
    }

    fn now(&self) -> u64 {
        now_us(self.state)
    }

    /// Until when the client is blocked, if it is at `now`.
    async fn blocked_until(&self, at: &At) -> Result<Option<u64>, StoreError> {
        let Some(read) = self.servers.get(&at.block).await? else {
            return Ok(None);
        };
        match Saved::decode(&read.bytes).map_err(StoreError::key_state)? {
            Saved::Blocked(until) if until > at.now => Ok(Some(until)),
            _ => Ok(None),
        }
    }

    /// Adds `delta` to the window's counter and reads the client's block, at once: one round
    /// trip of latency. The block has to be read by every decision (any instance may block the
    /// client at any time), and reading it first would be a second round trip; reading it
    /// only after a refusal would let a blocked client through. Returns the count before the
    /// addition (as this decision sees it) and the block.
    async fn add(&self, at: &At, delta: u64) -> Result<(u64, Option<u64>), StoreError> {
        let (count, blocked) = tokio::try_join!(
            self.servers.increment(&at.counter, delta, at.ttl()),
            self.blocked_until(at),
        )?;
        Ok((count.saturating_sub(delta), blocked))
    }

    /// Takes `units` this decision added back off its counter, to the end even if the
    /// decision is dropped meanwhile.
    async fn give_back(&self, at: &At, units: u64) -> Result<(), StoreError> {
        if units == 0 {
            return Ok(());
        }
        let (servers, counter) = (Arc::clone(self.servers), at.counter.clone());
        to_the_end(async move { servers.decrement(&counter, units).await }).await
    }

    /// Blocks the client until `until` (µs) and forgets the window's count, to the end even if
    /// the decision is dropped meanwhile.
    async fn start_block(
        &self,
        key: &str,
        policy: &Policy,
        at: &At,
        until: u64,
    ) -> Result<(), StoreError> {
        let (servers, state, counter) = (
            Arc::clone(self.servers),
            self.state.clone(),
            at.counter.clone(),
        );
        let (key, policy) = (key.to_owned(), policy.clone());
        let duration = Duration::from_micros(until.saturating_sub(at.now));
        to_the_end(async move {
            state.block(&key, &policy, duration).await?;
            servers.delete(&counter).await
        })
        .await
    }

    /// Decides a request of `cost`; a denial starts the policy's block if `blocking`, else
    /// with `charge` it stays counted (past the limit by at most one more quota, as
    /// `State::charge` records it).
    pub(super) async fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
        blocking: bool,
        charge: bool,
    ) -> Result<Decision, StoreError> {
        let cost = u64::from(cost.max(1));
        let at = self.at(key, policy, self.now(), None);
        let (count, blocked) = self.add(&at, cost).await?;
        if let Some(until) = blocked {
            self.give_back(&at, cost).await?;
            return Ok(algorithm::blocked(&at.p, at.now, until, cost));
        }
        let decision = State::fixed_window(at.start, count).check(&at.p, at.now, cost);
        if decision.allowed {
            return Ok(decision);
        }
        if let Some(until) = block_after(&decision, policy, at.now).filter(|_| blocking) {
            self.start_block(key, policy, &at, until).await?;
            return Ok(algorithm::blocked(&at.p, at.now, until, cost));
        }
        // Charged as the memory store charges: a blocking check of a policy that blocks never
        // is (its denials start blocks instead).
        let kept = if charge && (!blocking || policy.block_for().is_none()) {
            let most = at.p.limit.saturating_mul(2).max(count);
            count.saturating_add(cost).min(most) - count
        } else {
            0
        };
        self.give_back(&at, cost - kept).await?;
        Ok(decision)
    }

    /// The decision a request of `cost` would get now (0: a look), counting nothing.
    pub(super) async fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let at = self.at(key, policy, self.now(), None);
        let (count, blocked) =
            tokio::try_join!(self.servers.counter(&at.counter), self.blocked_until(&at))?;
        let cost = u64::from(cost);
        if let Some(until) = blocked {
            return Ok(algorithm::blocked(&at.p, at.now, until, cost));
        }
        let mut state = State::fixed_window(at.start, count.map_or(0, |(count, _)| count));
        Ok(match cost {
            0 => state.look(&at.p, at.now),
            _ => state.check(&at.p, at.now, cost),
        })
    }

    /// Forgets the client's block and the window's count.
    pub(super) async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        let at = self.at(key, policy, self.now(), None);
        tokio::try_join!(
            self.state.reset(key, policy),
            self.servers.delete(&at.counter)
        )?;
        Ok(())
    }

    /// Blocks the client for `duration` (zero: a reset) and forgets the window's count.
    pub(super) async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let at = self.at(key, policy, self.now(), None);
        self.state.block(key, policy, duration).await?;
        self.servers.delete(&at.counter).await
    }

    /// Takes `n` off the window's count (memcached stops at 0). A blocked client has no count
    /// to take from: its block forgot it.
    pub(super) async fn refund(
        &self,
        key: &str,
        policy: &Policy,
        n: u32,
    ) -> Result<(), StoreError> {
        let at = self.at(key, policy, self.now(), None);
        self.servers.decrement(&at.counter, u64::from(n)).await
    }

    /// Leases from `min` to `max` units of the window in one addition, and gives back at once
    /// what the window had no room for.
    pub(super) async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        let at = self.at(key, policy, self.now(), None);
        let min = u64::from(min.max(1));
        // More than the limit never fits: no need to count it even for a moment.
        let ask = u64::from(max).max(min).min(at.p.limit.max(min));
        let (count, blocked) = self.add(&at, ask).await?;
        if let Some(until) = blocked {
            self.give_back(&at, ask).await?;
            let denied = algorithm::blocked(&at.p, at.now, until, min);
            return Ok(Grant::new(0, denied, 0));
        }
        let g = State::fixed_window(at.start, count).acquire(&at.p, at.now, min, ask);
        self.give_back(&at, ask - g.granted).await?;
        let granted = u32::try_from(g.granted).unwrap_or(u32::MAX);
        Ok(Grant::new(granted, g.decision, g.mark))
    }

    /// Gives back up to `unused` units of `grant` while its window lasts, and returns how many
    /// were taken back: no more than the window still counts (read, then compare-and-set, so
    /// the answer is exact; a return is rare, once per lease).
    pub(super) async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        let at = self.at(key, policy, self.now(), Some(grant.mark));
        let ended = at.now >= at.start.saturating_add(at.p.period.max(1));
        if ended || unused == 0 {
            return Ok(0);
        }
        for _ in 0..MAX_ATTEMPTS {
            let Some((count, version)) = self.servers.counter(&at.counter).await? else {
                return Ok(0);
            };
            let taken = u64::from(unused).min(count);
            if taken == 0 {
                return Ok(0);
            }
            let ttl = at.ttl();
            if (self.servers)
                .set_counter(&at.counter, count - taken, version, ttl)
                .await?
            {
                return Ok(u32::try_from(taken).unwrap_or(u32::MAX));
            }
        }
        Err(StoreError::key_state(format!(
            "the counter {} changed under {MAX_ATTEMPTS} tries in a row",
            at.counter
        )))
    }
}

/// Runs `work` to its end even if the caller stops waiting for it (a timeout, a client gone):
/// in a task of its own, bounded by [`SETTLE_TIMEOUT`]. Outside a runtime, in place.
async fn to_the_end<F>(work: F) -> Result<(), StoreError>
where
    F: Future<Output = Result<(), StoreError>> + Send + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return work.await;
    };
    let task = runtime.spawn(async move {
        tokio::time::timeout(SETTLE_TIMEOUT, work)
            .await
            .unwrap_or_else(|_| Err(StoreError::backend("memcached: a give-back timed out")))
    });
    task.await
        .map_err(|e| StoreError::backend(format!("memcached: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_key_is_the_state_key_with_the_window_start() {
        assert_eq!(
            counter_key("tollgate:api:fixed_window:", 60, "client"),
            "tollgate:api:fixed_window@60:client"
        );
        assert_eq!(
            counter_key("t:api:fixed_window:", 5, "x:fixed_window:1"),
            "t:api:fixed_window@5:x:fixed_window:1"
        );
    }
}
