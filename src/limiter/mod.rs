//! The decision for one request, shared by every clone of the service: which rules apply,
//! with which keys and costs; asking the store; and what its answer means for the request
//! (proceed with headers, wait, or a [`Refusal`]), which the service renders.
//! Timeouts, the circuit breaker and the fallback are the store wrappers' (`store::wrappers`).

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use http::request::Parts;
use smallvec::SmallVec;

use crate::engine::{Ask, Engine};
use crate::error::{ControlError, StoreError};
use crate::key;
use crate::quiet_log::QuietLog;
use crate::quota::{Policy, Quota};
use crate::response::{DenyResponse, HeaderStyle, Refusal};
use crate::rules::{CompiledRule, InForce, Mode, RuleSource};
use crate::telemetry::{self, Outcome};
use client_quota::{ClientQuota, Tier};
use count::Counted;
use give_back::Place;

mod client_quota;
pub(crate) mod count;
mod door;
mod express;
pub(crate) mod give_back;
mod in_flight;
pub(crate) mod settle;
pub(crate) mod slots;
mod verdict;

pub(crate) use verdict::Verdict;

/// What the layer does with a request that has no client key (e.g. no `x-api-key` header, or
/// no peer address because the server was not set up to provide one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnMissingKey {
    /// Refuse it as a bad request (`400 Bad Request`) naming what is missing. The default.
    #[default]
    Reject,
    /// Let the request through unlimited by that rule, without its headers.
    Skip,
    /// Count every such request against one shared "anonymous" bucket.
    Shared,
}

/// The key that every keyless request shares under [`OnMissingKey::Shared`]. No client can
/// send it: every extracted key is sanitized, and sanitized keys starting with `#` are 33-byte
/// digests.
const ANONYMOUS_KEY: &str = "#anonymous";

/// Tells requests the layer never limits (health checks, preflights).
pub(crate) type SkipFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

pub(crate) struct Limiter {
    /// The rules in force; replaced whole when a rules file changes.
    pub(crate) rules: Arc<RuleSource>,
    pub(crate) skip: Option<SkipFn>,
    /// Decides: the store, wrapped as the builder set it up.
    pub(crate) engine: Engine,
    pub(crate) on_missing_key: OnMissingKey,
    pub(crate) headers: HeaderStyle,
    pub(crate) deny: Option<DenyResponse>,
    /// Logs `quota_for` closures that return invalid quotas.
    pub(crate) tier_log: QuietLog,
    pub(crate) shadow_log: QuietLog,
    /// Whether the task renewing the slots of requests in flight runs.
    pub(crate) renewing: AtomicBool,
}

/// What `call` does with a request before anything async happens.
pub(crate) enum Plan<'a> {
    /// Call the inner service without limiting.
    Pass,
    /// Refuse at once (no key, bad cost). Boxed, as rare.
    Refuse(Box<Refusal>),
    /// Decided already: the usual layer's request (see `express`).
    Decided(Verdict),
    /// Ask the store.
    Check(Pending<'a>),
}

/// The limits one request must pass.
pub(crate) struct Pending<'a> {
    rules: InForce<'a>,
    /// Most requests meet one rule: no list is allocated for it.
    checks: SmallVec<[Planned<'a>; 1]>,
}

impl Pending<'_> {
    /// The same checks, holding their rules themselves: for a request that waits for a store
    /// (no guard or borrow is held across an await).
    pub(crate) fn owned(self) -> Pending<'static> {
        Pending {
            rules: self.rules.owned(),
            checks: self.checks.into_iter().map(Planned::owned).collect(),
        }
    }

    /// Whether a rule of this request has `count_status`.
    #[inline]
    fn counts_later(&self) -> bool {
        self.checks.iter().any(|c| self.counts_status(c))
    }

    /// Whether a rule of this request is priced by its response.
    #[inline]
    fn prices_later(&self) -> bool {
        self.rules.has_priced() && {
            let rules = self.rules.rules();
            self.checks.iter().any(|c| rules[c.rule].priced.is_some())
        }
    }

    /// What the request owes its rules with `count_status`, once its response is known.
    fn counted(self) -> Vec<Counted> {
        let rules = self.rules.rules();
        (self.checks.into_iter())
            .filter_map(|c| {
                let statuses = rules[c.rule].count_status.clone()?;
                let policy = match c.tier.map(|tier| *tier) {
                    Some(Tier::Known(policy, _)) => policy,
                    _ => rules[c.rule].policy.clone(),
                };
                Some(Counted {
                    statuses,
                    key: c.key.into_owned(),
                    policy,
                    cost: c.cost,
                })
            })
            .collect()
    }

    /// The places this request takes in its delay-mode rules' queues.
    fn delay_places(&self) -> Vec<Place> {
        let rules = self.rules.rules();
        (self.checks.iter())
            .filter(|c| rules[c.rule].delay.is_some())
            .map(|c| Place {
                key: c.key.clone().into_owned(),
                policy: self.policy(c).clone(),
                cost: c.cost,
            })
            .collect()
    }

    /// The policy `check` is decided by: its tier's, or its rule's.
    fn policy<'b>(&'b self, check: &'b Planned<'_>) -> &'b Policy {
        match check.tier.as_deref() {
            Some(Tier::Known(policy, _)) => policy,
            _ => &self.rules.rules()[check.rule].policy,
        }
    }

    /// Whether a check's quota is still being found (see [`settle`](Limiter::settle)).
    fn finding(&self) -> bool {
        (self.checks.iter()).any(|c| matches!(c.tier.as_deref(), Some(Tier::Finding(_))))
    }

    /// What the engine is asked for `check`: a look for a rule with `count_status` (counted
    /// once the response is known), and never refusing for a shadow-mode rule.
    #[inline]
    fn ask<'b>(&'b self, check: &'b Planned<'_>) -> Ask<'b> {
        let rule = &self.rules.rules()[check.rule];
        Ask::new(&check.key, self.policy(check), check.cost)
            .blocking(rule.mode != Mode::Shadow)
            .look(self.counts_status(check))
    }

    /// Whether `check`'s rule has `count_status`.
    fn counts_status(&self, check: &Planned<'_>) -> bool {
        self.rules.rules()[check.rule].count_status.is_some()
    }

    /// The quota `check` is decided by: its tier's, or its rule's.
    fn quota(&self, check: &Planned<'_>) -> Quota {
        match check.tier.as_deref() {
            Some(Tier::Known(_, quota)) => *quota,
            _ => self.rules.rules()[check.rule].quota,
        }
    }
}

/// One matching rule's check.
struct Planned<'a> {
    /// Index into `Pending::rules`.
    rule: usize,
    /// Sanitized; borrowed from the request when it is a part of it as it is (a header's
    /// value), so that deciding at once allocates no key.
    key: Cow<'a, str>,
    cost: u32,
    /// The client's own quota when it has one (a tier, a lookup's, an override), or what
    /// finding it waits for; else the rule's own is used, not copied. Boxed: a policy is
    /// large, and most rules have no quotas per client.
    tier: Option<Box<Tier>>,
}

impl Planned<'_> {
    /// The same check, its key its own.
    fn owned(self) -> Planned<'static> {
        Planned {
            rule: self.rule,
            key: Cow::Owned(self.key.into_owned()),
            cost: self.cost,
            tier: self.tier,
        }
    }
}

impl Limiter {
    /// The plan of a request under `rules` (the rules in force, read once for the request's
    /// `call`).
    pub(crate) fn plan<'a>(&'a self, rules: InForce<'a>, parts: &'a Parts) -> Plan<'a> {
        if self.skip.as_ref().is_some_and(|skip| skip(parts)) {
            telemetry::skipped();
            return Plan::Pass;
        }
        if let Some(rule) = rules.sole() {
            // The usual setup: the one check is planned at once. A request without a key
            // is the general path's to answer.
            if let Some(key) = rule.key.extract_borrowed(parts) {
                let key = key::sanitize_borrowed(key);
                // The usual layer's request is decided now (see `express`), unless it was tried
                // before the request was taken apart (`express_head`).
                let plain = rules.plain().filter(|_| self.head_first(&rules).is_none());
                if let Some(verdict) = plain.and_then(|plain| self.express(plain, &key)) {
                    return Plan::Decided(verdict);
                }
                let sole = Planned {
                    rule: 0,
                    key,
                    cost: 1,
                    tier: None,
                };
                return Plan::Check(Pending {
                    rules,
                    checks: SmallVec::from_buf([sole]),
                });
            }
        }
        if rules.skips(parts) {
            telemetry::skipped();
            return Plan::Pass;
        }
        let mut checks = SmallVec::new();
        for (index, rule) in rules.matching(parts) {
            let (key, tier) = match rule.key.extract_borrowed(parts) {
                Some(raw) if rule.has_client_quotas() => {
                    match self.client_quota(rule, parts, raw.into_owned()) {
                        (key, ClientQuota::Rule) => (Cow::Owned(key), None),
                        (key, ClientQuota::Tier(tier)) => (Cow::Owned(key), Some(tier)),
                        (_, ClientQuota::Unlimited) => continue,
                    }
                }
                Some(key) => (key::sanitize_borrowed(key), None),
                None => match self.on_missing_key {
                    OnMissingKey::Skip => {
                        telemetry::request(&rule.policy, Outcome::Skipped);
                        continue;
                    }
                    // Not sanitized, so no client's key can equal it.
                    OnMissingKey::Shared => (Cow::Borrowed(ANONYMOUS_KEY), None),
                    OnMissingKey::Reject => {
                        let message = format!(
                            "Bad Request: no client key for rate limiting: expected {}",
                            rule.key.describe()
                        );
                        return Plan::Refuse(Box::new(Refusal::BadRequest(message)));
                    }
                },
            };
            let cost = match rule.cost.of(parts, rule.max_cost) {
                Ok(cost) => cost,
                Err(message) => return Plan::Refuse(Box::new(Refusal::BadRequest(message))),
            };
            checks.push(Planned {
                rule: index,
                key,
                cost,
                tier,
            });
        }
        if checks.is_empty() {
            return Plan::Pass;
        }
        Plan::Check(Pending { rules, checks })
    }

    /// Finds the quotas of the checks still finding theirs (see `client_quota`), and drops
    /// the checks of clients their rule does not limit.
    pub(crate) async fn settle(&self, pending: &mut Pending<'_>) {
        let rules = &pending.rules;
        let mut settled = SmallVec::<[Planned<'_>; 1]>::new();
        for mut check in std::mem::take(&mut pending.checks) {
            if let Some(Tier::Finding(_)) = check.tier.as_deref() {
                let Some(Tier::Finding(finding)) = check.tier.take().map(|tier| *tier) else {
                    continue;
                };
                let rule = &rules.rules()[check.rule];
                match self.found(rule, &check.key, finding).await {
                    ClientQuota::Rule => {}
                    ClientQuota::Tier(tier) => check.tier = Some(tier),
                    ClientQuota::Unlimited => continue,
                }
            }
            settled.push(check);
        }
        pending.checks = settled;
    }

    /// The policy and quota of `key`'s tier under `rule`, if the rule has tiers; `None`: the
    /// rule's own.
    pub(crate) fn tier(&self, rule: &CompiledRule, key: &str) -> Option<(Policy, Quota)> {
        let quota = rule.quota_for.as_ref().and_then(|tiers| tiers(key))?;
        match rule.policy_for(quota) {
            Ok(policy) => Some((policy, quota)),
            Err(e) => {
                if self.tier_log.should_log().is_some() {
                    tracing::error!(
                        target: "tollgate",
                        "quota_for returned an invalid quota; using the rule's own: {e}"
                    );
                }
                None
            }
        }
    }

    /// The sanitized key and the policy (the rule's, or the client's own quota's) by which
    /// requests of the client `key` are decided under the rule named `rule`: what acting on
    /// one client uses. A lookup sees a request head with nothing in it.
    pub(crate) async fn client(
        &self,
        rule: &str,
        key: &str,
    ) -> Result<(String, Policy), ControlError> {
        let rules = self.rules.current();
        let Some(found) = rules.rules().iter().find(|r| r.policy.name() == rule) else {
            return Err(self.unknown_rule(rule));
        };
        if found.in_flight.is_some() {
            // A limit on requests in flight has slots, not a state to peek at or change.
            return Err(ControlError::Store(StoreError::Unsupported(
                "peek, reset, block or refund of a limit on requests in flight",
            )));
        }
        let (sanitized, mut quota) = match found.has_client_quotas() {
            true => self.client_quota(found, &no_request(), key.to_owned()),
            false => (key::sanitize(key.to_owned()), ClientQuota::Rule),
        };
        if let ClientQuota::Tier(tier) = quota {
            quota = match *tier {
                Tier::Finding(finding) => self.found(found, &sanitized, finding).await,
                known => ClientQuota::Tier(Box::new(known)),
            };
        }
        let policy = match quota {
            ClientQuota::Tier(tier) => match *tier {
                Tier::Known(policy, _) => policy,
                Tier::Finding(_) => found.policy.clone(),
            },
            _ => found.policy.clone(),
        };
        Ok((sanitized, policy))
    }
}

/// The head of a request with nothing in it: what a lookup sees for a client acted on outside
/// a request (the door, an admin's peek).
pub(crate) fn no_request() -> Parts {
    http::Request::new(()).into_parts().0
}

impl Limiter {
    /// The sanitized key of the client `key` under the rule named `rule`, which must take
    /// quotas set at run time; and `quota`, if given, must fit it.
    pub(crate) fn overridable(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
    ) -> Result<String, ControlError> {
        let rules = self.rules.current();
        let Some(found) = rules.rules().iter().find(|r| r.policy.name() == rule) else {
            return Err(self.unknown_rule(rule));
        };
        if !found.overridable {
            return Err(ControlError::NotOverridable { rule: rule.into() });
        }
        if let Some(quota) = quota {
            found.policy_for(quota).map_err(ControlError::Quota)?;
        }
        Ok(key::sanitize(key.to_owned()))
    }

    /// The error for a rule named `rule` that is not in force, listing those that are.
    fn unknown_rule(&self, rule: &str) -> ControlError {
        let rules = self.rules.current();
        ControlError::UnknownRule {
            rule: rule.to_owned(),
            known: (rules.rules().iter())
                .map(|r| r.policy.name().to_owned())
                .collect(),
        }
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("rules", &self.rules)
            .field("engine", &self.engine)
            .field("on_missing_key", &self.on_missing_key)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}
