//! A client's own quota under a rule: set for it at run time (an override in the store), looked
//! up (a rule's `QuotaLookup`), or its tier (`quota_for`), in that order; else the rule's.
//! Found at once when every part is known here (cached), or after waiting for what is not: a
//! lookup under way, an override to read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::request::Parts;
use tokio::time::Instant;

use super::Limiter;
use crate::engine::LookupCounts;
use crate::key;
use crate::lookup_cache::{Found, Leader, Waiter};
use crate::quota::{Policy, Quota};
use crate::rules::{CompiledRule, Looked, Lookup, QuotaLookup};
use crate::telemetry;

/// A check's quota when it is not its rule's own.
pub(crate) enum Tier {
    /// The client's own: this policy (of the rule's name), of this quota.
    Known(Policy, Quota),
    /// Not known yet: what is still to be found.
    Finding(Finding),
}

/// What a client's quota still waits for.
pub(crate) struct Finding {
    /// The key as the rule's key extractor read it, for `quota_for`.
    raw: String,
    /// Whether the override is still to be read from the store.
    read_override: bool,
    /// The lookup's answer, or the lookup under way.
    lookup: Looking,
}

/// Where a rule's lookup stands for a client.
enum Looking {
    /// The rule has no lookup.
    None,
    /// Its answer.
    Done(Looked),
    /// Under way: its answer comes by the deadline (the lookup's timeout from when this
    /// request met it), whatever else the request waits for meanwhile.
    Waiting(Waiter<Looked>, Instant),
}

/// A client's quota under a rule, as far as it is known.
pub(crate) enum ClientQuota {
    /// The rule's own quota.
    Rule,
    /// Another.
    Tier(Box<Tier>),
    /// None: the rule does not limit the client.
    Unlimited,
}

impl Limiter {
    /// The sanitized key of the client `raw` (as the rule's key extractor read it) and its
    /// quota under `rule`, for the request `parts`: known at once, or to be
    /// [found](Self::found). A lookup this needs is started here, where the request is seen.
    pub(crate) fn client_quota(
        &self,
        rule: &CompiledRule,
        parts: &Parts,
        raw: String,
    ) -> (String, ClientQuota) {
        if !rule.overridable && rule.quota_from.is_none() {
            // Tiers alone: nothing to wait for.
            let quota = self.settled(rule, &raw, None);
            return (key::sanitize(raw), quota);
        }
        let key = key::sanitize(raw.clone());
        let overridden = match rule.overridable {
            true => self.engine.override_ready(rule.policy.name(), &key),
            false => Some(None),
        };
        if let Some(Some(quota)) = overridden {
            return (key, self.tier_of(rule, quota));
        }
        let lookup = match &rule.quota_from {
            None => Looking::None,
            Some(lookup) => self.look_up(lookup, rule, parts, &raw, &key),
        };
        let quota = match (overridden.is_none(), lookup) {
            (false, Looking::None) => self.settled(rule, &raw, None),
            (false, Looking::Done(looked)) => self.settled(rule, &raw, Some(looked)),
            (read_override, lookup) => ClientQuota::Tier(Box::new(Tier::Finding(Finding {
                raw,
                read_override,
                lookup,
            }))),
        };
        (key, quota)
    }

    /// The client's quota once `finding` has what it waits for: the override read (one read
    /// at a time per client, cached for `OVERRIDE_TTL`), the lookup's answer (within its
    /// timeout, else the rule's quota).
    pub(crate) async fn found(
        &self,
        rule: &CompiledRule,
        key: &str,
        finding: Finding,
    ) -> ClientQuota {
        if finding.read_override {
            if let Some(quota) = self.engine.quota_override(rule.policy.name(), key).await {
                return self.tier_of(rule, quota);
            }
        }
        let looked = match finding.lookup {
            Looking::None => None,
            Looking::Done(looked) => Some(looked),
            Looking::Waiting(waiter, deadline) => {
                Some(waiter.answer_by(deadline).await.unwrap_or(Looked::Failed))
            }
        };
        self.settled(rule, &finding.raw, looked)
    }

    /// The client's quota from its lookup's answer (an override being none), else its tier.
    fn settled(&self, rule: &CompiledRule, raw: &str, looked: Option<Looked>) -> ClientQuota {
        match looked {
            Some(Looked::Quota(quota)) => self.tier_of(rule, quota),
            Some(Looked::Unlimited) => ClientQuota::Unlimited,
            Some(Looked::Failed) | None => match self.tier(rule, raw) {
                Some((policy, quota)) => ClientQuota::Tier(Box::new(Tier::Known(policy, quota))),
                None => ClientQuota::Rule,
            },
        }
    }

    /// `quota` as the client's under `rule`: the rule's own when equal, else a tier of it.
    fn tier_of(&self, rule: &CompiledRule, quota: Quota) -> ClientQuota {
        if quota == rule.quota {
            return ClientQuota::Rule;
        }
        match rule.policy_for(quota) {
            Ok(policy) => ClientQuota::Tier(Box::new(Tier::Known(policy, quota))),
            Err(e) => {
                if self.tier_log.should_log().is_some() {
                    tracing::error!(
                        target: "tollgate",
                        rule = rule.policy.name(),
                        "a client's quota {quota} does not fit the rule ({e}); using the rule's own"
                    );
                }
                ClientQuota::Rule
            }
        }
    }

    /// The answer of `rule`'s lookup for `key`, kept or under way; or a lookup started now.
    fn look_up(
        &self,
        lookup: &QuotaLookup,
        rule: &CompiledRule,
        parts: &Parts,
        raw: &str,
        key: &str,
    ) -> Looking {
        let counts = self.engine.lookup_counts();
        let name = rule.policy.shared_name();
        let deadline = Instant::now() + lookup.timeout_setting();
        let leader = match lookup.cache().find(key) {
            Found::Ready(looked) => {
                counts.cache_hits.fetch_add(1, Ordering::Relaxed);
                telemetry::quota_lookup_cache_hit(name);
                return Looking::Done(looked);
            }
            Found::Waiting(waiter) => {
                counts.cache_hits.fetch_add(1, Ordering::Relaxed);
                telemetry::quota_lookup_cache_hit(name);
                return Looking::Waiting(waiter, deadline);
            }
            Found::Leading(leader) => leader,
        };
        counts.made.fetch_add(1, Ordering::Relaxed);
        telemetry::quota_lookup(name);
        let Some(waiter) = leader.waiter() else {
            return Looking::Done(Looked::Failed);
        };
        // Run on its own, so that the requests waiting for it get their answer even if this
        // one is dropped first.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Looking::Done(Looked::Failed);
        };
        let running = Running {
            lookup: lookup.clone(),
            leader,
            counts: Arc::clone(counts),
            rule: Arc::clone(name),
        };
        runtime.spawn(running.run(lookup.resolver().resolve(parts, raw)));
        Looking::Waiting(waiter, deadline)
    }
}

/// A lookup running on its own, and where its answer goes.
struct Running {
    lookup: QuotaLookup,
    leader: Leader<Looked>,
    counts: Arc<LookupCounts>,
    rule: Arc<str>,
}

impl Running {
    /// Runs `future` within the lookup's timeout, keeps its answer and gives it to the
    /// requests waiting for it; a failure is counted, and logged when lookups start failing
    /// (and their answering again, when they stop).
    async fn run(self, future: Lookup) {
        let Running {
            lookup,
            leader,
            counts,
            rule,
        } = self;
        let failure = match tokio::time::timeout(lookup.timeout_setting(), future).await {
            Ok(Ok(Some(quota))) => Ok(Looked::Quota(quota)),
            Ok(Ok(None)) => Ok(Looked::Unlimited),
            Ok(Err(error)) => Err(("error", error.to_string())),
            Err(_) => Err((
                "timeout",
                format!("no answer in {:?}", lookup.timeout_setting()),
            )),
        };
        let looked = match failure {
            Ok(looked) => {
                answering(lookup.failing(), &rule);
                looked
            }
            Err((reason, why)) => {
                counts.failures.fetch_add(1, Ordering::Relaxed);
                telemetry::quota_lookup_failure(&rule, reason);
                failing(lookup.failing(), &rule, &why);
                Looked::Failed
            }
        };
        leader.finish(looked, lookup.ttl_of(&looked));
    }
}

/// Logs that quota lookups of `rule` fail, if they did not already.
fn failing(state: &AtomicBool, rule: &str, why: &str) {
    if !state.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            target: "tollgate",
            rule,
            "quota lookups of rule {rule:?} fail ({why}); clients get the rule's own quota \
             until a lookup answers again"
        );
    }
}

/// Logs that quota lookups of `rule` answer again, if they were failing.
fn answering(state: &AtomicBool, rule: &str) {
    if state.swap(false, Ordering::Relaxed) {
        tracing::info!(target: "tollgate", rule, "quota lookups of rule {rule:?} answer again");
    }
}
