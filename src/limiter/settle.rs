//! [`Settlement`]: what a request owes its rules priced by the response
//! ([`Rule::cost_from_response`](crate::rules::Rule::cost_from_response)): the estimate it
//! reserved at admission, settled at the real cost once the response tells it, in one store
//! call per rule ([`Engine::settle`](crate::engine::Engine::settle)): the difference charged
//! (even past the quota: "every hit"), or given back.
//!
//! A settlement is a guard. Whatever ends the request first settles it, in a task of its own
//! that no hang-up stops: the response head that has the cost, the body's end (its trailers,
//! or the last frame that names the cost), or its drop (an error, a cancelled request, a
//! dropped or failed body), which settles at the estimate (or at zero, if the rule says so).

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::client_quota::Tier;
use super::{Limiter, Pending};
use crate::decision::Decision;
use crate::quota::Policy;
use crate::response::{self, AtEnd, HeaderStyle, Headers, Shown};
use crate::rules::Priced;

/// The reservations of one admitted request under its priced rules; settled once, when its
/// cost is known or it ends without one. Boxed: few requests are priced by their response.
pub(crate) struct Settlement(Option<Box<Owed>>);

struct Owed {
    limiter: Arc<Limiter>,
    reserved: Vec<Reserved>,
    /// The rate-limit headers' items and decisions as admitted (empty when the layer sends
    /// none): the settled decisions replace those of the priced rules.
    shown: Vec<(String, HeaderValue, Decision)>,
}

/// One priced rule's reservation.
struct Reserved {
    key: String,
    policy: Policy,
    priced: Arc<Priced>,
    /// The request's estimate, and what the store took of it (0 when a shadow-mode rule
    /// refused it, which takes nothing).
    estimate: u32,
    reserved: u32,
    max_cost: u32,
    /// When the quota would have been whole again after the reservation (the window's end
    /// for the fixed windows): past it, nothing is given back, as the reservation has
    /// expired with its window and what is there now was taken by others. `None`: beyond
    /// this process's clock (a store of one's own may say so).
    whole_at: Option<Instant>,
    /// The cost found so far.
    found: Option<u64>,
    /// This rule's place in `Owed::shown`.
    shown: Option<usize>,
}

impl Limiter {
    /// The settlement of an admitted request, from the decisions of its checks (in order):
    /// `None` when no rule of it is priced by the response.
    pub(super) fn settlement(
        self: &Arc<Self>,
        pending: &Pending<'_>,
        decisions: &[Decision],
    ) -> Option<Settlement> {
        let rules = pending.rules.rules();
        let now = Instant::now();
        let headed = self.headers != HeaderStyle::None;
        let mut shown = Vec::new();
        let mut reserved = Vec::new();
        for (check, decision) in pending.checks.iter().zip(decisions) {
            let rule = &rules[check.rule];
            if headed {
                let item = match check.tier.as_deref() {
                    Some(Tier::Known(policy, _)) => crate::rules::header_item(policy),
                    _ => rule.header_item.clone(),
                };
                shown.push((rule.policy.name().to_owned(), item, *decision));
            }
            let Some(priced) = &rule.priced else {
                continue;
            };
            reserved.push(Reserved {
                key: check.key.clone().into_owned(),
                policy: pending.policy(check).clone(),
                priced: Arc::clone(priced),
                estimate: check.cost,
                reserved: if decision.allowed { check.cost } else { 0 },
                max_cost: rule.max_cost,
                whole_at: now.checked_add(decision.reset_after),
                found: None,
                shown: headed.then(|| shown.len() - 1),
            });
        }
        if reserved.is_empty() {
            return None;
        }
        Some(Settlement(Some(Box::new(Owed {
            limiter: Arc::clone(self),
            reserved,
            shown,
        }))))
    }
}

impl Settlement {
    /// Reads the costs the response head tells: whether every one is known now (else the
    /// body tells the rest, or its end settles them as unknown).
    pub(crate) fn head(&mut self, head: &http::response::Parts) -> bool {
        let Some(owed) = self.0.as_mut() else {
            return true;
        };
        let mut known = true;
        for r in &mut owed.reserved {
            r.found = r.priced.in_head(head);
            known &= r.found.is_some() || !r.priced.in_body();
        }
        known
    }

    /// Settles at the costs found, in a task of its own; what it returns is the rate-limit
    /// headers after the settlement (empty if unchanged). `None` outside a Tokio runtime,
    /// where nothing is settled.
    pub(crate) fn start(mut self) -> Option<JoinHandle<Headers>> {
        let owed = self.0.take()?;
        spawn(*owed, true)
    }
}

impl AtEnd for Settlement {
    fn data(&mut self, data: &Bytes) {
        let Some(owed) = self.0.as_mut() else {
            return;
        };
        for r in &mut owed.reserved {
            if let Some(cost) = r.priced.in_frame(data) {
                r.found = Some(cost);
            }
        }
    }

    fn end(&mut self, trailers: Option<&HeaderMap>) -> Option<JoinHandle<Headers>> {
        let mut owed = self.0.take()?;
        if let Some(trailers) = trailers {
            for r in &mut owed.reserved {
                if let Some(cost) = r.priced.in_trailers(trailers) {
                    r.found = Some(cost);
                }
            }
        }
        spawn(*owed, true)
    }
}

impl Drop for Settlement {
    /// Ended before its cost was known (an error, a cancelled request, a dropped or failed
    /// body): settled as unknown.
    fn drop(&mut self) {
        if let Some(owed) = self.0.take() {
            spawn(*owed, false);
        }
    }
}

/// Settles `owed` in a task of its own, at the costs found if the response `finished`, else
/// as unknown; `None` outside a Tokio runtime (no shared store runs there either).
fn spawn(owed: Owed, finished: bool) -> Option<JoinHandle<Headers>> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(runtime.spawn(settle(owed, finished)))
}

/// One store call per rule: the difference between the settled cost and the reservation,
/// charged while over or given back; the rate-limit headers after it.
async fn settle(mut owed: Owed, finished: bool) -> Headers {
    let engine = &owed.limiter.engine;
    let mut changed = false;
    for r in &owed.reserved {
        let found = r.found.filter(|_| finished);
        let settled = r.priced.settled(found, r.estimate, r.max_cost);
        // Past the reservation's time only a charge is made (see `Reserved::whole_at`).
        let reserved = match r.whole_at.is_none_or(|at| Instant::now() < at) {
            true => r.reserved,
            false => r.reserved.min(settled),
        };
        // A store error is the store's to count and log: the difference is lost.
        let decision = match engine.settle(&r.key, &r.policy, reserved, settled).await {
            Ok(Some(charged)) => Some(charged),
            // What is left now, for the headers, when something was given back.
            Ok(None) if settled < reserved => engine.peek(&r.key, &r.policy, 0).await.ok(),
            _ => None,
        };
        if let (Some(decision), Some(i)) = (decision, r.shown) {
            if let Some(entry) = owed.shown.get_mut(i) {
                entry.2 = decision;
                changed = true;
            }
        }
    }
    if !changed {
        return Headers::default();
    }
    let shown: Vec<(Shown<'_>, Decision)> = (owed.shown.iter())
        .map(|(name, item, decision)| {
            let item = std::borrow::Cow::Borrowed(item);
            (
                Shown {
                    name: name.as_str(),
                    item,
                },
                *decision,
            )
        })
        .collect();
    let headers = response::rate_limit_headers(owed.limiter.headers, &shown);
    owed.shown.clear();
    headers
}

impl fmt::Debug for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules = self.0.as_ref().map_or(0, |owed| owed.reserved.len());
        f.debug_struct("Settlement").field("rules", &rules).finish()
    }
}
