//! Requests in flight in the limiter: a request under in-flight rules takes their slots first
//! (waiting for one in delay mode), then has its rates decided, and keeps its slots in a
//! guard ([`Slots`]) until its response is done; and the renewal that keeps the slots of
//! running requests alive in a shared store.
//!
//! Slots first, rates second: a request refused for lack of a slot is not charged to its rate
//! rules, which are never asked; one a rate refuses gives its slots back at once. What that
//! costs is a moment in which a request a rate will refuse holds a slot: under-admission for
//! one store call, never over-admission.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use super::slots::Slots;
use super::verdict::Later;
use super::{Limiter, Pending, Verdict};
use crate::decision::Decision;
use crate::engine::{Ask, Charging};
use crate::error::StoreError;
use crate::rules::{InFlightRule, Mode};

/// How long a request waiting for a slot first waits before it asks again (a slot given back
/// in this instance wakes it at once; one given back by another instance is seen at the next
/// ask), doubling up to [`POLL_MAX`].
const POLL_MIN: Duration = Duration::from_millis(5);
const POLL_MAX: Duration = Duration::from_millis(50);

impl Pending<'_> {
    /// Whether a check of this request limits requests in flight.
    #[inline]
    pub(super) fn holds_slots(&self) -> bool {
        self.rules.has_in_flight() && {
            let rules = self.rules.rules();
            self.checks
                .iter()
                .any(|c| rules[c.rule].in_flight.is_some())
        }
    }

    /// Puts the checks of in-flight rules first (their slots are taken first), keeping the
    /// order of each kind.
    pub(super) fn slots_first(&mut self) {
        let rules = self.rules.rules();
        self.checks
            .sort_by_key(|c| rules[c.rule].in_flight.is_none());
    }
}

impl Limiter {
    /// The verdict of a request under in-flight rules, whose checks come first in `pending`
    /// ([`slots_first`](Pending::slots_first)): its slots are taken, then its rates decided
    /// (see the module docs). A request that proceeds carries its slots in its verdict; one
    /// that does not gives them back as it returns.
    pub(super) async fn decide_in_flight(self: &Arc<Self>, pending: &Pending<'_>) -> Verdict {
        let rules = pending.rules.rules();
        let slot_checks = (pending.checks.iter())
            .take_while(|c| rules[c.rule].in_flight.is_some())
            .count();
        let mut slots = Slots::default();
        let mut decisions = Vec::with_capacity(pending.checks.len());
        for check in &pending.checks[..slot_checks] {
            let rule = &rules[check.rule];
            let Some(in_flight) = &rule.in_flight else {
                continue;
            };
            match self.take_slot(&check.key, in_flight, &mut slots).await {
                Ok(decision) => {
                    decisions.push(decision);
                    if !decision.allowed && rule.mode != Mode::Shadow {
                        // Refused for lack of a slot: the rates are not asked.
                        return self.verdict(pending, &decisions);
                    }
                }
                Err(_) => return self.unanswered(pending),
            }
        }
        let rates: Vec<Ask<'_>> = (pending.checks[slot_checks..].iter())
            .map(|c| pending.ask(c))
            .collect();
        if !rates.is_empty() {
            match self.engine.decide(&rates, Charging::AllowedOnly).await {
                Ok(decided) => decisions.extend(decided),
                Err(_) => return self.unanswered(pending),
            }
        }
        with_slots(self.settled_verdict(pending, &decisions), slots)
    }

    /// Takes a slot of `key` under `rule`, held in `slots` from before the store is asked; in
    /// delay mode, waits for one up to the rule's `max_delay`. The last refusal when none
    /// came.
    pub(super) async fn take_slot(
        self: &Arc<Self>,
        key: &str,
        rule: &InFlightRule,
        slots: &mut Slots,
    ) -> Result<Decision, StoreError> {
        let deadline = tokio::time::Instant::now() + rule.max_wait;
        let mut poll = POLL_MIN;
        loop {
            // Registered before asking, so that a slot given back meanwhile is not missed.
            let mut given_back = pin!(self.engine.slot_given_back());
            given_back.as_mut().enable();
            let slot = self.engine.new_slot();
            slots.hold(self, key, &rule.limit, slot);
            let decision = match self.engine.take_slot(key, &rule.limit, slot).await {
                Ok(decision) => decision,
                // The store may have taken it: it is given back with the others.
                Err(StoreError::Timeout) => return Err(StoreError::Timeout),
                Err(e) => {
                    slots.not_taken();
                    return Err(e);
                }
            };
            if decision.allowed {
                slots.taken();
                self.renew_slots_held();
                return Ok(decision);
            }
            slots.not_taken();
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(decision);
            }
            let mut sleep = pin!(tokio::time::sleep(poll.min(left)));
            poll_fn(|cx| {
                let woken = given_back.as_mut().poll(cx).is_ready();
                match woken || sleep.as_mut().poll(cx).is_ready() {
                    true => Poll::Ready(()),
                    false => Poll::Pending,
                }
            })
            .await;
            poll = (poll * 2).min(POLL_MAX);
        }
    }

    /// Starts the task that renews the slots this layer holds, if it is not running: every
    /// third of the shortest time to live among them (or among the in-flight rules in force,
    /// while none is held), one store call for all. It stops with the layer, or once no rule
    /// in force limits requests in flight.
    fn renew_slots_held(self: &Arc<Self>) {
        if self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.renewing.store(false, Ordering::Release);
            return;
        };
        runtime.spawn(renew(Arc::downgrade(self)));
    }
}

/// The renewal loop of [`Limiter::renew_slots_held`].
async fn renew(limiter: Weak<Limiter>) {
    loop {
        let wait = {
            let Some(limiter) = limiter.upgrade() else {
                return;
            };
            let rules = limiter.rules.current();
            let shortest = (rules.rules().iter())
                .filter_map(|r| r.in_flight.as_ref())
                .map(|f| f.limit.ttl() / 3)
                .min();
            match (shortest, limiter.engine.slot_renewal_interval()) {
                (None, None) => {
                    limiter.renewing.store(false, Ordering::Release);
                    return;
                }
                (a, b) => a.into_iter().chain(b).min().unwrap_or(POLL_MAX),
            }
        };
        tokio::time::sleep(wait).await;
        let Some(limiter) = limiter.upgrade() else {
            return;
        };
        // A store error is the store's to count and log; the next round tries again.
        let _ = limiter.engine.renew_slots().await;
    }
}

/// `verdict` with the request's `slots`: carried along when it proceeds, given back (dropped
/// here) when it is refused.
fn with_slots(verdict: Verdict, slots: Slots) -> Verdict {
    if !slots.is_held() {
        return verdict;
    }
    match verdict {
        Verdict::Proceed(headers) => Verdict::Later(Box::new(Later {
            headers,
            wait: Duration::ZERO,
            count: None,
            give_back: Default::default(),
            slots,
            settle: None,
        })),
        Verdict::Later(mut later) => {
            later.slots = slots;
            Verdict::Later(later)
        }
        refused => refused,
    }
}
