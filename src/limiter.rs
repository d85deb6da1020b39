//! The decision for one request, shared by every clone of the service: which rules apply,
//! asking the store (behind a timeout and a circuit breaker), and the response or headers.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::key;
use crate::quota::{Policy, Quota};
use crate::response::{self, GrpcCode, HeaderStyle};
use crate::rules::{CompiledRule, Mode, RuleSet, RuleSource};
use crate::store::{Breaker, Check, MemoryStore, OnStoreError, Permit, QuietLog, Store};

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

/// Observes every store error (after the policy has answered the request).
pub(crate) type ErrorHook = Arc<dyn Fn(&StoreError) + Send + Sync>;

/// Tells requests the layer never limits (health checks, preflights).
pub(crate) type SkipFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

pub(crate) struct Limiter<S> {
    /// The rules in force; replaced whole when a rules file changes.
    pub(crate) rules: Arc<RuleSource>,
    pub(crate) skip: Option<SkipFn>,
    pub(crate) store: S,
    pub(crate) on_missing_key: OnMissingKey,
    pub(crate) headers: HeaderStyle,
    pub(crate) deny: Option<DenyResponse>,
    pub(crate) on_store_error: OnStoreError,
    pub(crate) store_timeout: Duration,
    pub(crate) breaker: Breaker,
    pub(crate) fallback: MemoryStore,
    pub(crate) error_log: QuietLog,
    pub(crate) store_errors: AtomicU64,
    pub(crate) error_hook: Option<ErrorHook>,
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
    checks: Vec<Planned>,
    grpc: bool,
}

/// One matching rule's check.
struct Planned {
    /// Index into `Pending::rules`.
    rule: usize,
    key: String,
    cost: u32,
    /// The rule's policy, or its tier's.
    policy: Policy,
    quota: Quota,
}

/// The outcome of asking the store.
pub(crate) enum Verdict {
    /// Call the inner service and add these headers to its response.
    Proceed(HeaderMap),
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

impl<S: Store> Limiter<S> {
    pub(crate) fn plan(&self, parts: &Parts) -> Plan {
        if self.skip.as_ref().is_some_and(|skip| skip(parts)) {
            return Plan::Pass;
        }
        let rules = self.rules.current();
        if rules.skips(parts) {
            return Plan::Pass;
        }
        let grpc = is_grpc(parts);
        let mut checks = Vec::new();
        for (index, rule) in rules.matching(parts) {
            let (key, policy, quota) = match rule.key.extract(parts) {
                Some(key) => {
                    let (policy, quota) = self.tier(rule, &key);
                    (key::sanitize(key), policy, quota)
                }
                None => match self.on_missing_key {
                    OnMissingKey::Skip => continue,
                    // Not sanitized, so no client's key can equal it.
                    OnMissingKey::Shared => {
                        (ANONYMOUS_KEY.to_owned(), rule.policy.clone(), rule.quota)
                    }
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
                policy,
                quota,
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

    /// The policy for `key` under `rule`: its tier's quota if the rule has tiers.
    fn tier(&self, rule: &CompiledRule, key: &str) -> (Policy, Quota) {
        let Some(quota) = rule.quota_for.as_ref().and_then(|tiers| tiers(key)) else {
            return (rule.policy.clone(), rule.quota);
        };
        match rule.shape.policy(rule.policy.name(), quota) {
            Ok(policy) => (policy, quota),
            Err(e) => {
                if self.error_log.should_log().is_some() {
                    tracing::error!(
                        target: "tollgate",
                        "quota_for returned an invalid quota; using the rule's own: {e}"
                    );
                }
                (rule.policy.clone(), rule.quota)
            }
        }
    }

    pub(crate) async fn decide(self: Arc<Self>, pending: Pending) -> Verdict {
        let rules = pending.rules.rules();
        let checks: Vec<Check<'_>> = pending
            .checks
            .iter()
            .map(|c| Check {
                key: &c.key,
                policy: &c.policy,
                cost: c.cost,
                blocking: rules[c.rule].shape.mode != Mode::Shadow,
            })
            .collect();
        let decisions = match self.ask_store(&checks).await {
            Ok(decisions) => decisions,
            Err(error) => {
                self.report(&error);
                match self.on_store_error {
                    OnStoreError::FallbackToMemory => self.fallback.check_many_now(&checks),
                    OnStoreError::Deny => return Verdict::Respond(unavailable(pending.grpc)),
                    _ => return Verdict::Proceed(HeaderMap::new()),
                }
            }
        };

        let mut wait = Duration::ZERO;
        let mut denial: Option<Decision> = None;
        let mut seen = Vec::with_capacity(decisions.len());
        for (planned, decision) in pending.checks.iter().zip(decisions) {
            let rule = &rules[planned.rule];
            let decision = match rule.shape.mode {
                Mode::Delay => {
                    let (delay, own) = rule.shape.delay(&planned.quota, decision);
                    wait = wait.max(delay);
                    own
                }
                _ => decision,
            };
            if !decision.allowed {
                if rule.shape.mode == Mode::Shadow {
                    self.shadow_denied(rule.policy.name(), &planned.key);
                } else {
                    denial = Some(match denial {
                        Some(worst) if later(&worst, &decision) => worst,
                        _ => decision,
                    });
                }
            }
            seen.push((&planned.policy, decision));
        }
        let mut headers = HeaderMap::new();
        response::write_headers(self.headers, &seen, &mut headers);
        if let Some(decision) = denial {
            return Verdict::Respond(self.denial(&decision, headers, pending.grpc));
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Verdict::Proceed(headers)
    }

    fn denial(&self, decision: &Decision, headers: HeaderMap, grpc: bool) -> Response<Full<Bytes>> {
        let mut denial = match &self.deny {
            Some(deny) => deny(decision).map(|body| Full::new(Bytes::from(body))),
            None => response::too_many_requests(decision, grpc),
        };
        for (name, value) in headers {
            if let Some(name) = name {
                denial.headers_mut().entry(name).or_insert(value);
            }
        }
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

    /// Asks the store, unless the circuit is open; local stores are asked directly.
    async fn ask_store(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        if self.store.is_local() {
            return self.store.check_many(checks).await;
        }
        let permit = self.breaker.permit();
        if permit == Permit::Refuse {
            return Err(StoreError::CircuitOpen);
        }
        let result =
            match tokio::time::timeout(self.store_timeout, self.store.check_many(checks)).await {
                Ok(result) => result,
                Err(_) => Err(StoreError::Timeout),
            };
        if self.breaker.record(&permit, result.is_ok()) {
            tracing::warn!(
                target: "tollgate",
                "rate limit store failed repeatedly: circuit breaker open, answering by {:?}",
                self.on_store_error
            );
        }
        result
    }

    /// Counts a store error, logs it (quietly) and hands it to the user's hook.
    fn report(&self, error: &StoreError) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
        if !matches!(error, StoreError::CircuitOpen) {
            if let Some(suppressed) = self.error_log.should_log() {
                tracing::warn!(
                    target: "tollgate",
                    suppressed,
                    "{error} ({suppressed} more store errors since the last report)"
                );
            }
        }
        if let Some(hook) = &self.error_hook {
            hook(error);
        }
    }
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

impl<S: fmt::Debug> fmt::Debug for Limiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("rules", &self.rules)
            .field("store", &self.store)
            .field("on_missing_key", &self.on_missing_key)
            .field("headers", &self.headers)
            .field("on_store_error", &self.on_store_error)
            .field("store_timeout", &self.store_timeout)
            .field("breaker", &self.breaker)
            .finish_non_exhaustive()
    }
}
