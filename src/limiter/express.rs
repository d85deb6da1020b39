//! The usual request's way through the layer: one plain rule (see `RuleSet::plain`) whose
//! policy the engine's memory store alone decides (`Engine::in_memory`), decided as soon as
//! its key is read, with nothing more planned or boxed for it; and, when that key is a header,
//! before the request is taken apart.

use http::HeaderMap;

use super::verdict::spans_wanted;
use super::{Limiter, Verdict};
use crate::engine::InMemory;
use crate::key::{self, Header};
use crate::response::Refusal;
use crate::rules::{CompiledRule, InForce};
use crate::telemetry::{self, Outcome};

impl Limiter {
    /// The verdict of a request under `rules` (the rules in force, which its plan reads too)
    /// whose key is the plain rule's header, read from the request's `headers` before the
    /// request is taken apart (the head then never moves): `express`'s, for a layer keyed by
    /// a header. `None`, with nothing counted or changed, for any other request (the plan then
    /// reads the key, once: the header is read here only when this way decides it, or it is
    /// missing).
    #[inline]
    pub(crate) fn express_head(&self, rules: &InForce<'_>, headers: &HeaderMap) -> Option<Verdict> {
        let (rule, header) = self.head_first(rules)?;
        let memory = self.in_memory(rule)?;
        let key = header.read(headers)?;
        Some(self.express_in(memory, rule, &key::sanitize_borrowed(key)))
    }

    /// The plain rule of `rules` and its header, when [`express_head`](Self::express_head)
    /// tries it before the request is taken apart: not when a skip must see the head first.
    #[inline]
    pub(super) fn head_first<'r>(
        &self,
        rules: &'r InForce<'_>,
    ) -> Option<(&'r CompiledRule, &'r Header)> {
        if self.skip.is_some() {
            return None;
        }
        rules.plain_by_header()
    }

    /// The verdict of a request under the plain `rule`, its sanitized `key` read, when the
    /// engine's memory store alone decides the rule: the one the general way (`decide_ready`,
    /// `verdict`) makes for it, without the steps for what such a rule never has (tiers,
    /// costs, delays, counts after the response, leases). `None`, with nothing counted or
    /// changed, when it is the general way's (another store, a debug span to make).
    #[inline]
    pub(super) fn express(&self, rule: &CompiledRule, key: &str) -> Option<Verdict> {
        let memory = self.in_memory(rule)?;
        Some(self.express_in(memory, rule, key))
    }

    /// The engine's shortest way for `rule`, unless a subscriber wants the decision's span.
    #[inline]
    fn in_memory<'a>(&'a self, rule: &'a CompiledRule) -> Option<InMemory<'a>> {
        if spans_wanted() {
            return None;
        }
        self.engine.in_memory(&rule.policy)
    }

    /// `key`'s verdict under `rule`, decided by `memory`.
    #[inline(always)]
    fn express_in(&self, memory: InMemory<'_>, rule: &CompiledRule, key: &str) -> Verdict {
        let decision = memory.decide(key);
        let headers = self.headers_alone(rule, None, &decision);
        if decision.allowed {
            telemetry::request(&rule.policy, Outcome::Allowed);
            return Verdict::Proceed(headers);
        }
        telemetry::request(&rule.policy, Outcome::Denied);
        Verdict::Refuse(Box::new(Refusal::Denied {
            decision,
            headers,
            custom: self.deny.clone(),
        }))
    }
}
