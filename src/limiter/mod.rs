//! The decision for one request, shared by every clone of the service: which rules apply,
//! with which keys and costs; asking the store; and the response or headers from its answer.
//! Timeouts, the circuit breaker and the fallback are the store stack's (`store::stack`).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{Response, StatusCode};
use http_body_util::Full;
use smallvec::SmallVec;
use tracing::Instrument;

use crate::decision::Decision;
use crate::error::{ControlError, StoreError};
use crate::key;
use crate::quiet_log::QuietLog;
use crate::quota::{Policy, Quota};
use crate::response::{self, GrpcCode, HeaderStyle, Headers};
use crate::rules::{CompiledRule, Mode, RuleSet, RuleSource};
use crate::store::stack::{Check, Stack, StoreExt};
use crate::store::{OnStoreError, Store};
use crate::telemetry::{self, Outcome};
use count::{Counted, Counter};

pub(crate) mod count;

/// What the layer does with a request that has no client key (e.g. no `x-api-key` header, or
/// no peer address because the server was not set up to provide one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnMissingKey {
    /// Answer `400 Bad Request` naming what is missing (gRPC: INVALID_ARGUMENT). The default.
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

/// Builds the response for a denied request, in place of the default 429.
pub(crate) type DenyResponse = Arc<dyn Fn(&Decision) -> Response<String> + Send + Sync>;

/// Tells requests the layer never limits (health checks, preflights).
pub(crate) type SkipFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

pub(crate) struct Limiter {
    /// The rules in force; replaced whole when a rules file changes.
    pub(crate) rules: Arc<RuleSource>,
    pub(crate) skip: Option<SkipFn>,
    /// The store inside the failure handling, behind the leases for hot keys and the cache
    /// of denials.
    pub(crate) store: Stack,
    pub(crate) on_missing_key: OnMissingKey,
    pub(crate) headers: HeaderStyle,
    pub(crate) deny: Option<DenyResponse>,
    /// How to answer when the store cannot decide: only `Deny` answers (503); the store
    /// itself falls back to memory.
    pub(crate) on_store_error: OnStoreError,
    /// Logs `quota_for` closures that return invalid quotas.
    pub(crate) tier_log: QuietLog,
    pub(crate) shadow_log: QuietLog,
    pub(crate) shadow_denials: AtomicU64,
}

/// What `call` does with a request before anything async happens.
pub(crate) enum Plan {
    /// Call the inner service without limiting.
    Pass,
    /// Answer at once (no key, bad cost).
    Respond(Response<Full<Bytes>>),
    /// Ask the store.
    Check(Pending),
}

/// The limits one request must pass.
pub(crate) struct Pending {
    rules: Arc<RuleSet>,
    /// Most requests meet one rule: no list is allocated for it.
    checks: SmallVec<[Planned; 1]>,
    grpc: bool,
}

impl Pending {
    /// Whether a rule of this request has `count_status`.
    fn counts_later(&self) -> bool {
        let rules = self.rules.rules();
        self.checks
            .iter()
            .any(|c| rules[c.rule].count_status.is_some())
    }

    /// What the request owes its rules with `count_status`, once its response is known.
    fn counted(self) -> Vec<Counted> {
        let rules = self.rules.rules();
        (self.checks.into_iter())
            .filter_map(|c| {
                let statuses = rules[c.rule].count_status.clone()?;
                let policy = match c.tier {
                    Some(tier) => tier.0,
                    None => rules[c.rule].policy.clone(),
                };
                Some(Counted {
                    statuses,
                    key: c.key,
                    policy,
                    cost: c.cost,
                })
            })
            .collect()
    }

    /// The policy `check` is decided by: its tier's, or its rule's.
    fn policy<'a>(&'a self, check: &'a Planned) -> &'a Policy {
        match &check.tier {
            Some(tier) => &tier.0,
            None => &self.rules.rules()[check.rule].policy,
        }
    }

    /// The quota `check` is decided by: its tier's, or its rule's.
    fn quota(&self, check: &Planned) -> Quota {
        match &check.tier {
            Some(tier) => tier.1,
            None => self.rules.rules()[check.rule].quota,
        }
    }
}

/// One matching rule's check.
struct Planned {
    /// Index into `Pending::rules`.
    rule: usize,
    key: String,
    cost: u32,
    /// The tier's policy and quota when one applies to the key; else the rule's own are
    /// used, not copied. Boxed: a policy is large, and most rules have no tiers.
    tier: Option<Box<(Policy, Quota)>>,
}

/// The outcome of asking the store.
pub(crate) enum Verdict {
    /// After `wait` (delay mode), call the inner service and add `headers` to its response;
    /// then `count` it under the rules with `count_status` that list its status.
    Proceed {
        headers: Headers,
        wait: Duration,
        count: Option<Counter>,
    },
    /// Answer with this response instead.
    Respond(Response<Full<Bytes>>),
}

/// Whether a request is gRPC (`content-type: application/grpc…`).
pub(crate) fn is_grpc(parts: &Parts) -> bool {
    parts
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

fn bad_request(grpc: bool, message: &str) -> Response<Full<Bytes>> {
    response::limiter_response(
        grpc,
        StatusCode::BAD_REQUEST,
        GrpcCode::InvalidArgument,
        message,
        None,
    )
}

impl Limiter {
    pub(crate) fn plan(&self, parts: &Parts) -> Plan {
        if self.skip.as_ref().is_some_and(|skip| skip(parts)) {
            telemetry::skipped();
            return Plan::Pass;
        }
        let rules = self.rules.current();
        if rules.skips(parts) {
            telemetry::skipped();
            return Plan::Pass;
        }
        let grpc = is_grpc(parts);
        let mut checks = SmallVec::new();
        for (index, rule) in rules.matching(parts) {
            let (key, tier) = match rule.key.extract(parts) {
                Some(key) => {
                    let tier = self.tier(rule, &key).map(Box::new);
                    (key::sanitize(key), tier)
                }
                None => match self.on_missing_key {
                    OnMissingKey::Skip => {
                        telemetry::request(&rule.policy, Outcome::Skipped);
                        continue;
                    }
                    // Not sanitized, so no client's key can equal it.
                    OnMissingKey::Shared => (ANONYMOUS_KEY.to_owned(), None),
                    OnMissingKey::Reject => {
                        let message = format!(
                            "Bad Request: no client key for rate limiting: expected {}",
                            rule.key.describe()
                        );
                        return Plan::Respond(bad_request(grpc, &message));
                    }
                },
            };
            let cost = match rule.cost.of(parts, rule.max_cost) {
                Ok(cost) => cost,
                Err(message) => return Plan::Respond(bad_request(grpc, &message)),
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
        Plan::Check(Pending {
            rules,
            checks,
            grpc,
        })
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

    /// The sanitized key and the policy (the rule's, or its tier's) by which requests of the
    /// client `key` are decided under the rule named `rule`: what acting on one client uses.
    pub(crate) fn client(&self, rule: &str, key: &str) -> Result<(String, Policy), ControlError> {
        let rules = self.rules.current();
        let Some(found) = rules.rules().iter().find(|r| r.policy.name() == rule) else {
            let known = rules.rules().iter();
            return Err(ControlError::UnknownRule {
                rule: rule.to_owned(),
                known: known.map(|r| r.policy.name().to_owned()).collect(),
            });
        };
        let policy = match self.tier(found, key) {
            Some((policy, _)) => policy,
            None => found.policy.clone(),
        };
        Ok((key::sanitize(key.to_owned()), policy))
    }

    /// The verdict when the store can make it at once (see `StoreExt::check_ready`): a request
    /// under one limit that is not counted later. `None`: [`decide`](Self::decide) it.
    pub(crate) fn decide_ready(&self, pending: &Pending) -> Option<Verdict> {
        let [one] = pending.checks.as_slice() else {
            return None;
        };
        if pending.counts_later() {
            return None;
        }
        let span = decision_span(pending);
        let ready = span.in_scope(|| {
            self.store
                .check_ready(&one.key, pending.policy(one), one.cost)
        })?;
        let verdict = self.verdict(pending, [ready]);
        record_outcome(&span, &verdict);
        Some(verdict)
    }

    pub(crate) async fn decide(self: Arc<Self>, pending: Pending) -> Verdict {
        let span = decision_span(&pending);
        let counts_later = pending.counts_later();
        let asked = async {
            if counts_later {
                // Boxed: rules with `count_status` are few, and the peeks and checks they
                // wait on would otherwise make every request's future larger.
                Box::pin(self.ask_store_peeking(&pending)).await
            } else {
                self.ask_store(&pending).await
            }
        };
        let verdict = asked.instrument(span.clone()).await;
        record_outcome(&span, &verdict);
        match verdict {
            Verdict::Proceed { headers, wait, .. } if counts_later => Verdict::Proceed {
                headers,
                wait,
                count: Some(Counter::new(Arc::clone(&self), pending.counted())),
            },
            verdict => verdict,
        }
    }

    /// [`ask_store`](Self::ask_store) for a request under rules with `count_status`: their
    /// quotas are peeked, consuming nothing (the request is counted once its response is
    /// known). If one of them denies, the other rules are peeked too, so that nothing is
    /// consumed from any; else the other rules are checked, together, as usual.
    async fn ask_store_peeking(&self, pending: &Pending) -> Verdict {
        let rules = pending.rules.rules();
        let counted = |c: &Planned| rules[c.rule].count_status.is_some();
        let blocking = |c: &Planned| rules[c.rule].mode != Mode::Shadow;
        let mut decisions: Vec<Option<Decision>> = vec![None; pending.checks.len()];
        let decided: Result<(), StoreError> = async {
            for (i, c) in pending
                .checks
                .iter()
                .enumerate()
                .filter(|(_, c)| counted(c))
            {
                decisions[i] = Some(self.store.peek(&c.key, pending.policy(c), c.cost).await?);
            }
            let denied = (pending.checks.iter().zip(&decisions))
                .any(|(c, d)| blocking(c) && d.is_some_and(|d| !d.allowed));
            let others: Vec<usize> = (0..pending.checks.len())
                .filter(|&i| !counted(&pending.checks[i]))
                .collect();
            if denied {
                for &i in &others {
                    let c = &pending.checks[i];
                    decisions[i] = Some(self.store.peek(&c.key, pending.policy(c), c.cost).await?);
                }
            } else if !others.is_empty() {
                let checks: Vec<Check<'_>> = (others.iter().map(|&i| &pending.checks[i]))
                    .map(|c| Check::new(&c.key, pending.policy(c), c.cost).blocking(blocking(c)))
                    .collect();
                let checked = self.store.check_many(&checks).await?;
                for (&i, decision) in others.iter().zip(checked) {
                    decisions[i] = Some(decision);
                }
            }
            Ok(())
        }
        .await;
        match decided {
            Ok(()) => self.verdict(pending, decisions.into_iter().flatten()),
            Err(_) => {
                for check in &pending.checks {
                    telemetry::request(&rules[check.rule].policy, Outcome::StoreError);
                }
                match self.on_store_error {
                    OnStoreError::Deny => Verdict::Respond(unavailable(pending.grpc)),
                    // Fail open, without numbers; the response may still be counted.
                    _ => Verdict::Proceed {
                        headers: Headers::default(),
                        wait: Duration::ZERO,
                        count: None,
                    },
                }
            }
        }
    }

    /// Asks the store about every check and turns its answer into a verdict.
    async fn ask_store(&self, pending: &Pending) -> Verdict {
        let decided = match pending.checks.as_slice() {
            // One limit, the common case: no list of checks to build.
            [one] => self
                .store
                .check(&one.key, pending.policy(one), one.cost)
                .await
                .map(|decision| self.verdict(pending, [decision])),
            many => {
                let rules = pending.rules.rules();
                let checks: Vec<Check<'_>> = many
                    .iter()
                    .map(|c| Check {
                        key: &c.key,
                        policy: pending.policy(c),
                        cost: c.cost,
                        blocking: rules[c.rule].mode != Mode::Shadow,
                    })
                    .collect();
                let decided = self.store.check_many(&checks).await;
                decided.map(|decisions| self.verdict(pending, decisions))
            }
        };
        if decided.is_err() {
            let rules = pending.rules.rules();
            for check in &pending.checks {
                telemetry::request(&rules[check.rule].policy, Outcome::StoreError);
            }
        }
        match decided {
            Ok(verdict) => verdict,
            Err(_) if self.on_store_error == OnStoreError::Deny => {
                Verdict::Respond(unavailable(pending.grpc))
            }
            // Fail open, without rate-limit numbers the limiter does not know.
            Err(_) => Verdict::Proceed {
                headers: Headers::default(),
                wait: Duration::ZERO,
                count: None,
            },
        }
    }

    /// The response (or headers and wait) from the store's decisions, one per check.
    fn verdict(&self, pending: &Pending, decisions: impl IntoIterator<Item = Decision>) -> Verdict {
        let rules = pending.rules.rules();
        let mut wait = Duration::ZERO;
        let mut denial: Option<Decision> = None;
        let mut seen: SmallVec<[_; 1]> = SmallVec::with_capacity(pending.checks.len());
        for (planned, decision) in pending.checks.iter().zip(decisions) {
            let rule = &rules[planned.rule];
            let decision = match &rule.delay {
                Some(queue) => {
                    let (delay, own) = queue.release(&pending.quota(planned), decision);
                    wait = wait.max(delay);
                    own
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
                        Some(worst) if later(&worst, &decision) => worst,
                        _ => decision,
                    });
                }
            }
            seen.push((pending.policy(planned), decision));
        }
        let headers = response::rate_limit_headers(self.headers, &seen);
        match denial {
            Some(decision) => Verdict::Respond(self.denial(&decision, headers, pending.grpc)),
            None => Verdict::Proceed {
                headers,
                wait,
                count: None,
            },
        }
    }

    fn denial(&self, decision: &Decision, headers: Headers, grpc: bool) -> Response<Full<Bytes>> {
        let mut denial = match &self.deny {
            Some(deny) => deny(decision).map(|body| Full::new(Bytes::from(body))),
            None => response::too_many_requests(decision, grpc),
        };
        headers.fill_in(denial.headers_mut());
        denial
    }

    fn shadow_denied(&self, rule: &str, key: &str) {
        self.shadow_denials.fetch_add(1, Ordering::Relaxed);
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
fn decision_span(pending: &Pending) -> tracing::Span {
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
fn record_outcome(span: &tracing::Span, verdict: &Verdict) {
    if span.is_disabled() {
        return;
    }
    let outcome = match verdict {
        Verdict::Proceed { .. } => "proceed",
        Verdict::Respond(response) if response.status() == StatusCode::TOO_MANY_REQUESTS => {
            "denied"
        }
        Verdict::Respond(_) => "unavailable",
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

/// The fail-closed answer while the store is away: 503 (gRPC: UNAVAILABLE) with Retry-After.
fn unavailable(grpc: bool) -> Response<Full<Bytes>> {
    response::limiter_response(
        grpc,
        StatusCode::SERVICE_UNAVAILABLE,
        GrpcCode::Unavailable,
        "Service Unavailable: the rate limiter cannot decide right now",
        Some(Duration::from_secs(1)),
    )
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("rules", &self.rules)
            .field("store", &self.store)
            .field("on_missing_key", &self.on_missing_key)
            .field("headers", &self.headers)
            .field("on_store_error", &self.on_store_error)
            .finish_non_exhaustive()
    }
}
