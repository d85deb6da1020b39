//! The usual request's way through the layer: one plain rule (see `RuleSet::plain`) whose
//! policy the engine's memory store alone decides (`Engine::in_memory`), decided in `call`
//! with nothing planned or boxed for it.

use http::request::Parts;

use super::verdict::spans_wanted;
use super::{Limiter, Verdict};
use crate::key;
use crate::response::Refusal;
use crate::telemetry::{self, Outcome};

impl Limiter {
    /// The verdict of a request under a plain rule whose store is the memory store alone: the
    /// one the general way (`plan`, `decide_ready`, `verdict`) makes for it, without the steps
    /// for what such a rule never has (routes, tiers, costs, delays, counts after the
    /// response, leases). `None`, with nothing counted or changed, for every other request:
    /// the general way's (a skip to ask, no key, other rules or stores, a debug span to make).
    #[inline]
    pub(crate) fn express(&self, parts: &Parts) -> Option<Verdict> {
        if self.skip.is_some() || spans_wanted() {
            return None;
        }
        let rules = self.rules.in_force();
        let rule = rules.plain()?;
        let memory = self.engine.in_memory(&rule.policy)?;
        let key = key::sanitize_borrowed(rule.key.extract_borrowed(parts)?);
        let decision = memory.decide(&key);
        let headers = self.headers_alone(rule, None, &decision);
        if decision.allowed {
            telemetry::request(&rule.policy, Outcome::Allowed);
            return Some(Verdict::Proceed(headers));
        }
        telemetry::request(&rule.policy, Outcome::Denied);
        Some(Verdict::Refuse(Box::new(Refusal::Denied {
            decision,
            headers,
            custom: self.deny.clone(),
        })))
    }
}
