//! Health as the reference reports it (`src/server/health.go`): healthy only when every part
//! is — the store answers (asked before anything listens, and with
//! `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` every second from then on), no stop signal has come,
//! and (with `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`) a configuration holds a domain.
//! Reported on `/healthcheck` (any method: 200 `OK` or 500) and as the gRPC health status of
//! `ratelimit`.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tollgate::store::{Policy, RedisStore, Store};
use tollgate::{Algorithm, Quota};
use tollgate_rls::RateLimitService;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::error::StartError;
use crate::settings::StartupRetry;

/// The gRPC service name whose status the reference sets.
const SERVICE_NAME: &str = "ratelimit";

/// How often the gRPC status follows a change of configuration.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(250);

/// How often Redis is asked with `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`.
const STORE_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The parts health is made of.
pub(crate) struct Health {
    store_up: AtomicBool,
    terminating: AtomicBool,
    needs_config: bool,
    reporter: HealthReporter,
    /// What the gRPC status says now: 0 unset, 1 serving, 2 not serving.
    published: AtomicU8,
}

impl Health {
    /// Health once the store has answered (nothing listens before), before any signal.
    pub(crate) fn new(needs_config: bool, reporter: HealthReporter) -> Self {
        Self {
            store_up: AtomicBool::new(true),
            terminating: AtomicBool::new(false),
            needs_config,
            reporter,
            published: AtomicU8::new(0),
        }
    }

    /// Whether the server should get traffic now.
    pub(crate) fn ok(&self, service: &RateLimitService) -> bool {
        let waiting_for_config = self.needs_config && service.config().is_empty();
        self.store_up.load(Ordering::Relaxed)
            && !self.terminating.load(Ordering::Relaxed)
            && !waiting_for_config
    }

    /// Asks `store` every second and follows its answers (the reference's
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`, which fails health once its pool has no
    /// connection left and heals it at the next one: `src/redis/driver_impl.go`, `poolTrace`),
    /// until the server stops.
    pub(crate) async fn follow_store(
        &self,
        service: &RateLimitService,
        store: &RedisStore,
        timeout: Duration,
    ) {
        let Ok(policy) = probe_policy() else { return };
        while !self.terminating.load(Ordering::Relaxed) {
            let answer = tokio::time::timeout(timeout, store.peek("health", &policy, 1)).await;
            let up = matches!(answer, Ok(Ok(_)));
            if self.store_up.swap(up, Ordering::Relaxed) != up {
                match up {
                    true => tracing::warn!("Redis answers again: health follows"),
                    false => tracing::warn!("Redis does not answer: health fails until it does"),
                }
            }
            self.publish(service).await;
            tokio::time::sleep(STORE_PROBE_INTERVAL).await;
        }
    }

    /// A stop signal came: NOT_SERVING from now on, before the servers drain.
    pub(crate) async fn terminate(&self) {
        self.terminating.store(true, Ordering::Relaxed);
        self.set(false).await;
    }

    /// Sets the gRPC status from [`ok`](Self::ok), if it changed.
    pub(crate) async fn publish(&self, service: &RateLimitService) {
        self.set(self.ok(service)).await;
    }

    /// Keeps the gRPC status in step with the configuration, until the server stops.
    pub(crate) async fn follow(&self, service: &RateLimitService) {
        while !self.terminating.load(Ordering::Relaxed) {
            self.publish(service).await;
            tokio::time::sleep(PUBLISH_INTERVAL).await;
        }
    }

    async fn set(&self, serving: bool) {
        let code = if serving { 1 } else { 2 };
        if self.published.swap(code, Ordering::Relaxed) == code {
            return;
        }
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status(SERVICE_NAME, status).await;
    }
}

/// A look under a policy of its own, which changes nothing in the store.
fn probe_policy() -> Result<Policy, tollgate::ConfigError> {
    Quota::per_second(1).and_then(|q| Policy::new("tollgate-rls-health", q, Algorithm::FixedWindow))
}

/// Asks `store` (`described`, for the log) until it answers, as the reference connects to
/// Redis at start, before it listens: waits of `retry.initial` doubling up to `retry.max`,
/// with jitter. Returns an error once `retry.max_elapsed` (if not zero) has passed without an
/// answer.
pub(crate) async fn wait_for_store(
    store: &RedisStore,
    described: &str,
    timeout: Duration,
    retry: StartupRetry,
) -> Result<(), StartError> {
    let policy = probe_policy().map_err(StartError::Config)?;
    let started = Instant::now();
    let mut wait = retry.initial;
    loop {
        let answer = tokio::time::timeout(timeout, store.peek("health", &policy, 1)).await;
        let error = match answer {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {timeout:?}"),
        };
        let elapsed = started.elapsed();
        if !retry.max_elapsed.is_zero() && elapsed >= retry.max_elapsed {
            return Err(StartError::StoreUnreachable {
                store: described.to_owned(),
                waited: retry.max_elapsed,
                last: error,
            });
        }
        let jittered = wait.mul_f64(0.5 + jitter());
        tracing::warn!(
            "{described} did not answer ({error}); trying again in {jittered:?} (nothing \
             listens until it does, as in the reference)"
        );
        tokio::time::sleep(jittered).await;
        wait = (wait * 2).min(retry.max.max(retry.initial));
    }
}

/// A number in [0, 1) that differs between instances and calls, for the back-off's jitter.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, RandomState};
    let bits = RandomState::new().hash_one(Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}
