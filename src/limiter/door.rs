//! The door's decision: one client's cost under one rule, asked by code outside the layer
//! (a handler, a WebSocket loop, a job), decided and rendered as a request of that client
//! under that rule would be.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use super::client_quota::ClientQuota;
use super::slots::Slots;
use super::verdict::Later;
use super::{no_request, Limiter, Pending, Planned, Verdict};
use crate::decision::Decision;
use crate::error::ControlError;
use crate::key;
use crate::response::Headers;
use crate::rules::{InFlightRule, InForce};

impl Limiter {
    /// The decision (`None` when the store could not decide) and the verdict for `cost` units
    /// of the client `key` under the rule named `rule`, charged now: the same store call,
    /// headers and refusal as a request of that cost would get from the layer. A rule with
    /// `count_status` is charged now too (the door has no response to count), and a cost of
    /// 0 only looks. Under an in-flight rule, a slot is taken whatever the cost, waiting for
    /// one up to `wait` (else the rule's own `max_delay` in delay mode), and the verdict
    /// carries it.
    pub(crate) async fn check_client(
        self: &Arc<Self>,
        rule: &str,
        key: &str,
        cost: u32,
        wait: Option<Duration>,
    ) -> Result<(Option<Decision>, Verdict), ControlError> {
        let rules = InForce::Owned(self.rules.current());
        let Some(index) = rules.rules().iter().position(|r| r.policy.name() == rule) else {
            return Err(self.unknown_rule(rule));
        };
        let found = &rules.rules()[index];
        let (sanitized, tier) = match found.has_client_quotas() {
            true => match self.client_quota(found, &no_request(), key.to_owned()) {
                (key, ClientQuota::Rule) => (key, None),
                (key, ClientQuota::Tier(tier)) => (key, Some(tier)),
                // Not limited by the rule: allowed, with nothing to report.
                (_, ClientQuota::Unlimited) => {
                    return Ok((None, Verdict::Proceed(Headers::default())));
                }
            },
            false => (key::sanitize(key.to_owned()), None),
        };
        let planned = Planned {
            rule: index,
            key: Cow::Owned(sanitized),
            cost,
            tier,
        };
        let mut pending = Pending {
            rules,
            checks: SmallVec::from_buf([planned]),
        };
        if pending.finding() {
            self.settle(&mut pending).await;
        }
        let Some(one) = pending.checks.first() else {
            return Ok((None, Verdict::Proceed(Headers::default())));
        };
        if let Some(in_flight) = &pending.rules.rules()[index].in_flight {
            let in_flight = match wait {
                Some(max_wait) => &InFlightRule {
                    max_wait,
                    ..in_flight.clone()
                },
                None => in_flight,
            };
            let mut slots = Slots::default();
            return Ok(
                match self.take_slot(&one.key, in_flight, &mut slots).await {
                    Ok(decision) => {
                        let verdict = match self.verdict(&pending, &[decision]) {
                            Verdict::Proceed(headers) if slots.is_held() => {
                                Verdict::Later(Box::new(Later {
                                    headers,
                                    wait: Duration::ZERO,
                                    count: None,
                                    give_back: Default::default(),
                                    slots,
                                    settle: None,
                                }))
                            }
                            verdict => verdict,
                        };
                        (Some(decision), verdict)
                    }
                    Err(_) => (None, self.unanswered(&pending)),
                },
            );
        }
        let ask = pending.ask(one).look(false);
        let decided = match cost {
            0 => self.engine.peek(ask.key(), ask.policy(), 0).await,
            _ => self.engine.decide_one(&ask).await,
        };
        Ok(match decided {
            Ok(decision) => (Some(decision), self.verdict(&pending, &[decision])),
            Err(_) => (None, self.unanswered(&pending)),
        })
    }
}
