//! [`Verdict`]: what the limiter makes of the store's decisions for one request, made at once
//! or after waiting for the store, with its span and metrics.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;
use tracing::Instrument;

use super::client_quota::Tier;
use super::count::Counter;
use super::give_back::GiveBack;
use super::settle::Settlement;
use super::slots::Slots;
use super::{Limiter, Pending, Planned};
use crate::decision::Decision;
use crate::engine::{Ask, Charging};
use crate::response::{self, HeaderStyle, Headers, Refusal, Shown};
use crate::rules::{self, Mode};
use crate::store::OnStoreError;
use crate::telemetry::{self, Outcome};

/// The outcome of asking the store.
///
/// Three words at most: a tag, and the usual headers (a pointer and two numbers) or a pointer.
/// A larger verdict is written field by field and read back whole at once, which stalls the
/// processor for longer than the rest of a decision in memory takes; the usual headers held
/// here rather than in a box save an allocation per request.
pub(crate) enum Verdict {
    /// Call the inner service now, and add these headers to its response: most requests.
    Proceed(Headers),
    /// Call the inner service after a wait (delay mode), or count its response later (rules
    /// with `count_status`). Boxed, as rare.
    Later(Box<Later>),
    /// Answer instead of calling the inner service; the service renders the answer. Boxed,
    /// as rare.
    Refuse(Box<Refusal>),
}

/// A verdict to proceed with more to it than headers.
pub(crate) struct Later {
    /// Added to the inner service's response.
    pub(crate) headers: Headers,
    /// How long to wait before calling the inner service (delay mode; zero otherwise).
    pub(crate) wait: Duration,
    /// Counts the response under the rules with `count_status` that list its status.
    pub(crate) count: Option<Counter>,
    /// The places the request holds in delay queues, given back if it is dropped while it
    /// waits.
    pub(crate) give_back: GiveBack,
    /// The slots of requests in flight it holds, given back once its response is done.
    pub(crate) slots: Slots,
    /// What it reserved under rules priced by the response, settled once that is known.
    pub(crate) settle: Option<Settlement>,
}

impl Limiter {
    /// The verdict when the store can make it at once (see `Engine::decide_ready`): a request
    /// under one limit that is not counted later. `None`: [`decide`](Self::decide) it.
    pub(crate) fn decide_ready(self: &Arc<Self>, pending: &Pending<'_>) -> Option<Verdict> {
        let [one] = pending.checks.as_slice() else {
            return None;
        };
        let held = || pending.holds_slots() || pending.prices_later();
        if pending.counts_later() || pending.finding() || (pending.rules.holds_after() && held()) {
            return None;
        }
        let check = || self.engine.decide_ready(&pending.ask(one));
        let Some(span) = decision_span(pending) else {
            // No span to drop either: the usual request.
            let ready = check()?;
            return Some(self.verdict(pending, std::slice::from_ref(&ready)));
        };
        let ready = span.in_scope(check);
        let verdict = self.verdict(pending, std::slice::from_ref(ready.as_ref()?));
        record_outcome(Some(&span), &verdict);
        Some(verdict)
    }

    /// The verdict of a request that waits for the store.
    pub(crate) async fn decide(self: Arc<Self>, mut pending: Pending<'static>) -> Verdict {
        if pending.finding() {
            self.settle(&mut pending).await;
            if pending.checks.is_empty() {
                // Every rule let the client go unlimited.
                return Verdict::Proceed(Headers::default());
            }
        }
        if pending.rules.has_in_flight() {
            pending.slots_first();
        }
        let span = decision_span(&pending);
        let counts_later = pending.counts_later();
        let asked = self.ask_store(&pending);
        let verdict = match &span {
            None => asked.await,
            // Boxed: only for a debug subscriber, and the span would make every request's
            // future larger.
            Some(span) => Box::pin(asked).instrument(span.clone()).await,
        };
        record_outcome(span.as_ref(), &verdict);
        if !counts_later {
            return verdict;
        }
        // Only a request that proceeds has a response to count.
        let count = || Some(Counter::new(Arc::clone(&self), pending.counted()));
        match verdict {
            Verdict::Proceed(headers) => Verdict::Later(Box::new(Later {
                headers,
                wait: Duration::ZERO,
                count: count(),
                give_back: GiveBack::default(),
                slots: Slots::default(),
                settle: None,
            })),
            Verdict::Later(mut later) => {
                later.count = count();
                Verdict::Later(later)
            }
            verdict => verdict,
        }
    }

    /// Asks the engine about every check and turns its answer into a verdict. The rules
    /// with `count_status` are looks (the request is counted once its response is known),
    /// so a request they refuse consumes nothing from its other rules.
    async fn ask_store(self: &Arc<Self>, pending: &Pending<'_>) -> Verdict {
        if pending.holds_slots() {
            // Boxed: a rare way, and every request's decision would carry room for it.
            return Box::pin(self.decide_in_flight(pending)).await;
        }
        let decided = match pending.checks.as_slice() {
            // One limit, the common case: no list of asks to build. The engine's future is
            // boxed (here and below), as it is most of this one's, which `call` boxes: two
            // allocations small enough for the allocator's fast path cost less than one that
            // is not.
            [one] if !pending.counts_status(one) => {
                Box::pin(self.engine.decide_one_waiting(&pending.ask(one)))
                    .await
                    .map(|decision| self.settled_verdict(pending, std::slice::from_ref(&decision)))
            }
            many => {
                let asks: Vec<Ask<'_>> = many.iter().map(|c| pending.ask(c)).collect();
                let decided = Box::pin(self.engine.decide(&asks, Charging::AllowedOnly)).await;
                decided.map(|decisions| self.settled_verdict(pending, &decisions))
            }
        };
        decided.unwrap_or_else(|_| self.unanswered(pending))
    }

    /// The verdict when the store could not decide (its failure is counted, logged and
    /// handled by the store wrappers): refused when failing closed, else through, without the
    /// rate-limit numbers the limiter does not know (a `count_status` rule may still count
    /// the response).
    pub(super) fn unanswered(&self, pending: &Pending<'_>) -> Verdict {
        let rules = pending.rules.rules();
        for check in &pending.checks {
            telemetry::request(&rules[check.rule].policy, Outcome::StoreError);
        }
        match self.engine.on_store_error() {
            OnStoreError::Deny => Verdict::Refuse(Box::new(Refusal::Unavailable)),
            _ => Verdict::Proceed(Headers::default()),
        }
    }

    /// The verdict (headers, and a wait or a denial) from the store's decisions, one per
    /// check. A request that waits (delay mode) takes along its places in the delay queues,
    /// given back if it is dropped while it waits.
    pub(super) fn verdict(
        self: &Arc<Self>,
        pending: &Pending<'_>,
        decisions: &[Decision],
    ) -> Verdict {
        if let ([planned], [decision]) = (pending.checks.as_slice(), decisions) {
            if let Some(verdict) = self.allowed_alone(pending, planned, decision) {
                return verdict;
            }
        }
        let rules = pending.rules.rules();
        let mut wait = Duration::ZERO;
        let mut denial: Option<Decision> = None;
        // What the headers report: nothing to collect when there are none.
        let headed = self.headers != HeaderStyle::None;
        let mut seen: SmallVec<[_; 1]> = SmallVec::new();
        // The usual headers (IETF, one rule, its own quota) are the rule's held item and two
        // numbers: nothing is made for them here.
        let mut one_rule = None;
        let alone = pending.checks.len() == 1;
        for (planned, decision) in pending.checks.iter().zip(decisions) {
            let rule = &rules[planned.rule];
            let released;
            let decision = match &rule.delay {
                Some(queue) => {
                    let (delay, own) = queue.release(&pending.quota(planned), *decision);
                    wait = wait.max(delay);
                    released = own;
                    &released
                }
                None => decision,
            };
            if decision.allowed {
                telemetry::request(&rule.policy, Outcome::Allowed);
            } else {
                if rule.mode == Mode::Shadow {
                    telemetry::request(&rule.policy, Outcome::ShadowDenied);
                    self.shadow_denied(rule.policy.name(), &planned.key);
                } else {
                    telemetry::request(&rule.policy, Outcome::Denied);
                    denial = Some(match denial {
                        Some(worst) if later(&worst, decision) => worst,
                        _ => *decision,
                    });
                }
            }
            if headed && alone {
                one_rule = self.ietf_of_one(rule, planned.tier.as_deref(), decision);
            }
            if headed && one_rule.is_none() {
                seen.push((shown(rule, planned.tier.as_deref()), *decision));
            }
        }
        let headers = match (one_rule, headed) {
            (Some(headers), _) => headers,
            (None, true) => response::rate_limit_headers(self.headers, &seen),
            (None, false) => Headers::default(),
        };
        match denial {
            Some(decision) => Verdict::Refuse(Box::new(Refusal::Denied {
                decision,
                headers,
                custom: self.deny.clone(),
            })),
            None if wait.is_zero() => Verdict::Proceed(headers),
            None => Verdict::Later(Box::new(Later {
                headers,
                wait,
                count: None,
                give_back: GiveBack::new(Arc::clone(self), pending.delay_places()),
                slots: Slots::default(),
                settle: None,
            })),
        }
    }

    /// The [`verdict`](Self::verdict) of the usual request, allowed under one rule that does
    /// not delay: counted, and its headers. `None` for any other.
    #[inline]
    fn allowed_alone(
        &self,
        pending: &Pending<'_>,
        planned: &Planned<'_>,
        decision: &Decision,
    ) -> Option<Verdict> {
        let rule = &pending.rules.rules()[planned.rule];
        if !decision.allowed || rule.delay.is_some() {
            return None;
        }
        telemetry::request(&rule.policy, Outcome::Allowed);
        Some(Verdict::Proceed(self.headers_alone(
            rule,
            planned.tier.as_deref(),
            decision,
        )))
    }

    /// The headers of a request under `rule` alone, the client under its `tier`'s quota if it
    /// has one, else the rule's. Inlined always: most requests make none or the usual IETF
    /// ones, each a few instructions.
    #[inline(always)]
    pub(super) fn headers_alone(
        &self,
        rule: &rules::CompiledRule,
        tier: Option<&Tier>,
        decision: &Decision,
    ) -> Headers {
        if self.headers == HeaderStyle::None {
            return Headers::default();
        }
        if let Some(headers) = self.ietf_of_one(rule, tier, decision) {
            return headers;
        }
        response::rate_limit_headers(self.headers, &[(shown(rule, tier), *decision)])
    }

    /// The usual headers (IETF, one rule, the client under the rule's own quota) as the rule's
    /// held item and two numbers: nothing made for them. `None` for any other.
    #[inline]
    fn ietf_of_one(
        &self,
        rule: &rules::CompiledRule,
        tier: Option<&Tier>,
        decision: &Decision,
    ) -> Option<Headers> {
        if self.headers != HeaderStyle::Ietf || tier.is_some() {
            return None;
        }
        Headers::ietf_of_one(rule.header_kept?, decision)
    }

    /// The [`verdict`](Self::verdict), and for a request that proceeds under rules priced by
    /// the response, what it reserved to settle once the response tells its cost.
    pub(super) fn settled_verdict(
        self: &Arc<Self>,
        pending: &Pending<'_>,
        decisions: &[Decision],
    ) -> Verdict {
        let verdict = self.verdict(pending, decisions);
        if !pending.prices_later() {
            return verdict;
        }
        match verdict {
            Verdict::Proceed(headers) => match self.settlement(pending, decisions) {
                None => Verdict::Proceed(headers),
                settle => Verdict::Later(Box::new(Later {
                    headers,
                    wait: Duration::ZERO,
                    count: None,
                    give_back: GiveBack::default(),
                    slots: Slots::default(),
                    settle,
                })),
            },
            Verdict::Later(mut later) => {
                later.settle = self.settlement(pending, decisions);
                Verdict::Later(later)
            }
            refused => refused,
        }
    }

    fn shadow_denied(&self, rule: &str, key: &str) {
        self.engine.count_shadow_denial();
        if let Some(suppressed) = self.shadow_log.should_log() {
            tracing::info!(
                target: "tollgate::shadow",
                rule,
                key,
                suppressed,
                "shadow rule {rule:?} would have denied a request ({suppressed} more since the last report)"
            );
        }
    }
}

/// The `rate_limit` debug span of one request's decision, naming its rules.
///
/// None unless some subscriber may take debug spans, so that nothing is made, entered or left:
/// a disabled span costs a few hundred instructions a request (with tracing's `log` feature,
/// which axum turns on, each step also asks `log` whether to write it).
#[inline]
fn decision_span(pending: &Pending<'_>) -> Option<tracing::Span> {
    spans_wanted().then(|| new_decision_span(pending))
}

/// Whether some subscriber may take debug spans (see [`decision_span`]).
#[inline]
pub(super) fn spans_wanted() -> bool {
    use tracing::level_filters::{LevelFilter, STATIC_MAX_LEVEL};
    let debug = tracing::Level::DEBUG;
    debug <= STATIC_MAX_LEVEL && debug <= LevelFilter::current()
}

/// [`decision_span`], made.
#[cold]
fn new_decision_span(pending: &Pending<'_>) -> tracing::Span {
    let span = tracing::debug_span!(
        target: "tollgate",
        "rate_limit",
        rules = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let rules = pending.rules.rules();
        let names: Vec<&str> = pending
            .checks
            .iter()
            .map(|c| rules[c.rule].policy.name())
            .collect();
        span.record("rules", names.join(",").as_str());
    }
    span
}

/// Records the decision's outcome on its span, and logs it at debug level.
#[inline]
fn record_outcome(span: Option<&tracing::Span>, verdict: &Verdict) {
    let Some(span) = span.filter(|span| !span.is_disabled()) else {
        return;
    };
    let outcome = match verdict {
        Verdict::Proceed(_) | Verdict::Later(_) => "proceed",
        Verdict::Refuse(refusal) => match **refusal {
            Refusal::Denied { .. } => "denied",
            Refusal::Unavailable | Refusal::BadRequest(_) => "unavailable",
        },
    };
    span.record("outcome", outcome);
    span.in_scope(|| tracing::debug!(target: "tollgate", outcome, "rate limit decision"));
}

/// Whether denial `a` lasts at least as long as `b` (never-allowed lasts forever).
fn later(a: &Decision, b: &Decision) -> bool {
    match (a.retry_after, b.retry_after) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(x), Some(y)) => x >= y,
    }
}

/// What the headers show for one check: the quota the client is under, its `tier`'s or its
/// rule's.
fn shown<'r>(rule: &'r rules::CompiledRule, tier: Option<&Tier>) -> Shown<'r> {
    let item = match tier {
        Some(Tier::Known(policy, _)) => Cow::Owned(rules::header_item(policy)),
        _ => Cow::Borrowed(&rule.header_item),
    };
    Shown {
        name: rule.policy.name(),
        item,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request's verdict goes from the decision to the service: a tag and the usual
    /// headers (a pointer and packed numbers), nothing larger (see [`Verdict`]).
    #[test]
    fn a_verdict_is_three_words_at_most() {
        let three_words = 3 * std::mem::size_of::<usize>();
        assert_eq!(
            std::mem::size_of::<Headers>(),
            2 * std::mem::size_of::<usize>()
        );
        assert!(std::mem::size_of::<Verdict>() <= three_words);
        assert!(std::mem::size_of::<Option<Verdict>>() <= three_words);
    }
}
