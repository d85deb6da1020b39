//! One key's lease under one policy: the units in hand, the store's last refusal, and what
//! the next lease asks for.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::lease::Lease;
use crate::quota::Policy;
use crate::store::grant::Grant;
use crate::telemetry;

/// One key's lease under one policy.
pub(super) struct Entry {
    pub(super) policy: Policy,
    pub(super) key: Box<str>,
    pub(super) state: Mutex<LeaseState>,
    /// Held by the refill in flight: the others wait for it.
    pub(super) refill: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Default)]
pub(super) struct LeaseState {
    /// Counts leases, so that a return task touches only its own.
    pub(super) generation: u64,
    /// Units of the current lease not spent yet.
    pub(super) balance: u32,
    /// The current lease as the store granted it.
    pub(super) grant: Option<Grant>,
    /// When the current lease was granted and when it expires (µs, see `Shared::now`).
    pub(super) granted_at: u64,
    pub(super) expires_at: u64,
    /// Units asked for since the last refill, and when that was: the rate `Auto` sizes from.
    pub(super) demand: u64,
    pub(super) last_refill: u64,
    /// The size of the last lease asked for.
    pub(super) size: u32,
    /// Whether the last lease got fewer units than it asked for.
    pub(super) saturated: bool,
    /// The store's last refusal, and until when it holds.
    pub(super) denial: Option<(u64, Decision)>,
    /// Refills done, and why the last one failed if it did: requests that waited for a
    /// refill that failed share its error instead of each trying (and timing out) in turn.
    pub(super) refills: u64,
    pub(super) failed: Option<String>,
}

/// What the lease in hand says about a request.
pub(super) enum Spend {
    Answer(Decision),
    /// Some units are left, fewer than the cost: ask the store directly.
    Direct,
    /// Nothing left: refill.
    Empty,
}

impl LeaseState {
    /// Takes the unused units of an expired lease, to be given back.
    pub(super) fn take_expired(&mut self, now: u64) -> Option<(u32, Grant)> {
        if !self.has_expired_units(now) {
            return None;
        }
        let unused = std::mem::take(&mut self.balance);
        self.grant.map(|grant| (unused.min(grant.granted), grant))
    }

    /// Whether the lease in hand has expired with units left to give back.
    pub(super) fn has_expired_units(&self, now: u64) -> bool {
        now >= self.expires_at && self.balance > 0
    }

    /// Spends `cost` from the lease in hand, if it can.
    pub(super) fn spend(&mut self, cost: u32, now: u64) -> Spend {
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
    pub(super) fn want(
        &mut self,
        cost: u32,
        policy: &Policy,
        lifetime: Duration,
        now: u64,
    ) -> (u32, u32) {
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

impl Entry {
    pub(super) fn lock(&self) -> MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether forgetting this entry could lose units or a refill: it holds a lease, a
    /// refusal that still holds, or a refill in flight.
    pub(super) fn is_live(&self, now: u64) -> bool {
        let state = self.lock();
        state.balance > 0
            || state.expires_at > now
            || state.denial.is_some_and(|(until, _)| until > now)
            || self.refill.try_lock().is_err()
    }

    /// Stores the store's answer to a lease asked for at `sent_at` of up to `max`, and spends
    /// `cost` from it. Returns the request's decision and, with a new lease, its generation
    /// and how long until it expires.
    pub(super) fn store(
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
