//! The usual request's way through the layer: one plain rule (see `RuleSet::plain`) whose
//! policy the engine's memory store alone decides (`Engine::in_memory`), decided as soon as
//! its key is read, with nothing more planned or boxed for it.

use super::verdict::spans_wanted;
use super::{Limiter, Verdict};
use crate::response::Refusal;
use crate::rules::CompiledRule;
use crate::telemetry::{self, Outcome};

impl Limiter {
    /// The verdict of a request under the plain `rule`, its sanitized `key` read, when the
    /// engine's memory store alone decides the rule: the one the general way (`decide_ready`,
    /// `verdict`) makes for it, without the steps for what such a rule never has (tiers,
    /// costs, delays, counts after the response, leases). `None`, with nothing counted or
    /// changed, when it is the general way's (another store, a debug span to make).
    #[inline]
    pub(super) fn express(&self, rule: &CompiledRule, key: &str) -> Option<Verdict> {
        if spans_wanted() {
            return None;
        }
        let decision = self.engine.in_memory(&rule.policy)?.decide(key);
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
