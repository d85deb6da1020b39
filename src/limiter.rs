//! The decision for one request, shared by every clone of the service: what to check, asking
//! the store (behind a timeout and a circuit breaker), and the response or headers to give.

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
use crate::key::{self, KeyExtractor};
use crate::quota::Policy;
use crate::response::{self, GrpcCode, HeaderStyle};
use crate::store::{Breaker, MemoryStore, OnStoreError, Permit, QuietLog, Store};

/// What the layer does with a request that has no client key (e.g. no `x-api-key` header, or
/// no peer address because the server was not set up to provide one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnMissingKey {
    /// Answer `400 Bad Request` naming what is missing (gRPC: INVALID_ARGUMENT). The default.
    #[default]
    Reject,
    /// Let the request through unlimited, without rate-limit headers.
    Skip,
    /// Count every such request against one shared "anonymous" bucket.
    Shared,
}

/// The key that every keyless request shares under [`OnMissingKey::Shared`]. It cannot be
/// produced by an extractor: sanitized keys starting with `#` are 33-byte digests.
const ANONYMOUS_KEY: &str = "#anonymous";

/// Builds the response for a denied request, in place of the default 429.
pub(crate) type DenyResponse = Arc<dyn Fn(&Decision) -> Response<String> + Send + Sync>;

/// Observes every store error (after the policy has answered the request).
pub(crate) type ErrorHook = Arc<dyn Fn(&StoreError) + Send + Sync>;

pub(crate) struct Limiter<S> {
    pub(crate) policy: Policy,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) store: S,
    pub(crate) on_missing_key: OnMissingKey,
    pub(crate) headers: HeaderStyle,
    pub(crate) deny: Option<DenyResponse>,
    pub(crate) on_store_error: OnStoreError,
    pub(crate) store_timeout: Duration,
    pub(crate) breaker: Breaker,
    pub(crate) fallback: MemoryStore,
    pub(crate) log: QuietLog,
    pub(crate) store_errors: AtomicU64,
    pub(crate) error_hook: Option<ErrorHook>,
}

/// What `call` does with a request before anything async happens.
pub(crate) enum Plan {
    /// Call the inner service without limiting.
    Pass,
    /// Answer at once (no key).
    Respond(Response<Full<Bytes>>),
    /// Ask the store.
    Check { key: String, cost: u32, grpc: bool },
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

impl<S: Store> Limiter<S> {
    pub(crate) fn plan(&self, parts: &Parts) -> Plan {
        let grpc = is_grpc(parts);
        let key = match self.key.extract(parts) {
            Some(key) => key::sanitize(key),
            None => match self.on_missing_key {
                OnMissingKey::Skip => return Plan::Pass,
                OnMissingKey::Shared => ANONYMOUS_KEY.to_owned(),
                OnMissingKey::Reject => {
                    let message = format!(
                        "Bad Request: no client key for rate limiting: expected {}",
                        self.key.describe()
                    );
                    return Plan::Respond(response::limiter_response(
                        grpc,
                        StatusCode::BAD_REQUEST,
                        GrpcCode::InvalidArgument,
                        &message,
                        None,
                    ));
                }
            },
        };
        Plan::Check { key, cost: 1, grpc }
    }

    pub(crate) async fn decide(self: Arc<Self>, key: String, cost: u32, grpc: bool) -> Verdict {
        let decision = match self.ask_store(&key, cost).await {
            Ok(decision) => decision,
            Err(error) => {
                self.report(&error);
                match self.on_store_error {
                    OnStoreError::FallbackToMemory => {
                        self.fallback.check_now(&key, &self.policy, cost)
                    }
                    OnStoreError::Deny => return Verdict::Respond(unavailable(grpc)),
                    _ => return Verdict::Proceed(HeaderMap::new()),
                }
            }
        };
        let mut headers = HeaderMap::new();
        response::write_headers(self.headers, &[(&self.policy, decision)], &mut headers);
        if decision.allowed {
            return Verdict::Proceed(headers);
        }
        let mut denial = match &self.deny {
            Some(deny) => deny(&decision).map(|body| Full::new(Bytes::from(body))),
            None => response::too_many_requests(&decision, grpc),
        };
        for (name, value) in headers {
            if let Some(name) = name {
                denial.headers_mut().entry(name).or_insert(value);
            }
        }
        Verdict::Respond(denial)
    }

    /// Asks the store, unless the circuit is open; local stores are asked directly.
    async fn ask_store(&self, key: &str, cost: u32) -> Result<Decision, StoreError> {
        if self.store.is_local() {
            return self.store.check(key, &self.policy, cost).await;
        }
        let permit = self.breaker.permit();
        if permit == Permit::Refuse {
            return Err(StoreError::CircuitOpen);
        }
        let check = self.store.check(key, &self.policy, cost);
        let result = match tokio::time::timeout(self.store_timeout, check).await {
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
            self.log.error(error);
        }
        if let Some(hook) = &self.error_hook {
            hook(error);
        }
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
            .field("policy", &self.policy)
            .field("key", &self.key.describe())
            .field("store", &self.store)
            .field("on_missing_key", &self.on_missing_key)
            .field("headers", &self.headers)
            .field("on_store_error", &self.on_store_error)
            .field("store_timeout", &self.store_timeout)
            .field("breaker", &self.breaker)
            .finish_non_exhaustive()
    }
}
