//! One RLQS stream's state: its domain, and for each bucket it reports the quota it holds and
//! how long it has been idle. Each report is answered with an action for every bucket in it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    self, AbandonAction, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tollgate::store::OnStoreError;
use tonic::Status;

use super::bounds::{malformed, MAX_BUCKETS_PER_STREAM};
use super::bucket::{bucket_id, bucket_key, BucketKey};
use super::grant::{self, Reservation, ASSIGNMENT_TTL_SECS};
use super::share;
use super::stats::DomainStats;
use super::target::{target, Target};
use crate::limits::MAX_DOMAIN_BYTES;
use crate::service::RateLimitService;

/// What a stream remembers of one bucket.
#[derive(Debug, Default)]
struct BucketState {
    /// The quota its last assignment holds, to give back what was not used.
    reserved: Option<Reservation>,
    /// How long it has reported no request.
    idle: Duration,
    /// Assignments sent, so each new token bucket differs from the last.
    generation: u32,
}

/// One stream's state.
#[derive(Debug)]
pub(crate) struct StreamState {
    domain: Option<String>,
    buckets: HashMap<BucketKey, BucketState>,
    abandon_after: Duration,
    stats: Option<DomainStats>,
}

impl StreamState {
    pub(crate) fn new(abandon_after: Duration) -> Self {
        Self {
            domain: None,
            buckets: HashMap::new(),
            abandon_after,
            stats: None,
        }
    }

    /// Checks `report` whole (domain, buckets, bounds) before anything is taken from the
    /// store: a malformed report changes nothing.
    fn check(&self, report: &RateLimitQuotaUsageReports) -> Result<Vec<BucketKey>, Status> {
        let domain = &report.domain;
        if domain.is_empty() {
            return Err(malformed("the domain is empty"));
        }
        if domain.len() > MAX_DOMAIN_BYTES {
            let n = domain.len();
            return Err(malformed(format_args!(
                "domain of {n} bytes, over the limit of {MAX_DOMAIN_BYTES}"
            )));
        }
        if let Some(first) = &self.domain {
            if first != domain {
                return Err(malformed(format_args!(
                    "the domain changed on the stream, from {first:?} to {domain:?}"
                )));
            }
        }
        let mut keys = Vec::with_capacity(report.bucket_quota_usages.len());
        let mut new = 0usize;
        for usage in &report.bucket_quota_usages {
            if usage
                .time_elapsed
                .is_some_and(|t| t.seconds < 0 || t.nanos < 0)
            {
                return Err(malformed("a negative time_elapsed"));
            }
            let key = bucket_key(usage.bucket_id.as_ref())?;
            if !self.buckets.contains_key(&key) {
                new += 1;
            }
            keys.push(key);
        }
        // Envoy reports each bucket once a report; twice would be answered twice.
        let mut sorted: Vec<&BucketKey> = keys.iter().collect();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(malformed("a bucket reported twice in one report"));
        }
        let total = self.buckets.len() + new;
        if total > MAX_BUCKETS_PER_STREAM {
            return Err(malformed(format_args!(
                "buckets per stream: {total}, over the limit of {MAX_BUCKETS_PER_STREAM}"
            )));
        }
        Ok(keys)
    }

    /// Answers one report: an action per bucket in it. Envoy's first report of a bucket has
    /// `time_elapsed` 0 s (global_client_impl.cc, `createBucketImpl`), taken as 1 s.
    pub(crate) async fn answer(
        &mut self,
        service: &RateLimitService,
        report: RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, Status> {
        let keys = self.check(&report)?;
        if self.domain.is_none() {
            self.stats = Some(DomainStats::new(service, &report.domain));
            self.domain = Some(report.domain.clone());
        }
        let mut actions = Vec::with_capacity(keys.len());
        for (key, usage) in keys.into_iter().zip(&report.bucket_quota_usages) {
            if let Some(action) = self.bucket(service, &report.domain, key, usage).await {
                actions.push(action);
            }
        }
        if let Some(stats) = &self.stats {
            stats.reported(self.buckets.len());
        }
        Ok(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// The action for one bucket's usage; `None` when there is nothing to assign (no
    /// configuration yet, the store failing): Envoy's own behaviours apply.
    async fn bucket(
        &mut self,
        service: &RateLimitService,
        domain: &str,
        key: BucketKey,
        usage: &BucketQuotaUsage,
    ) -> Option<BucketAction> {
        let used = usage
            .num_requests_allowed
            .saturating_add(usage.num_requests_denied);
        let elapsed = usage.time_elapsed.map_or(0, |t| t.seconds).max(1) as u64;
        let state = self.buckets.entry(key.clone()).or_default();
        let previous = state.reserved.take();
        let now = SystemTime::now();
        if let Some(r) = previous {
            // What it held and did not use goes back, within the same window only.
            let unused = u64::from(r.units).saturating_sub(usage.num_requests_allowed);
            if unused > 0 && grant::window_of(&r.policy, now) == r.window {
                let unused = u32::try_from(unused).unwrap_or(u32::MAX);
                let _ = service.inner.engine.refund(&r.key, &r.policy, unused).await;
            }
        }
        match used {
            0 => state.idle = state.idle.saturating_add(Duration::from_secs(elapsed)),
            _ => state.idle = Duration::ZERO,
        }
        if state.idle >= self.abandon_after {
            self.buckets.remove(&key);
            if let Some(stats) = &self.stats {
                stats.abandoned();
            }
            return Some(action(
                &key,
                bucket_action::BucketAction::AbandonAction(AbandonAction {}),
            ));
        }
        let strategy = match target(service, domain, &key) {
            Target::NoConfig => return None,
            Target::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
            Target::DenyAll => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
            Target::Limited {
                key: store_key,
                policy,
                family,
            } => {
                let want = grant::wanted(used as f64 / elapsed as f64);
                let engine = &service.inner.engine;
                let want = share::fair_share(engine, &store_key, &policy, want).await;
                let units = match grant::reserve(engine, &store_key, &policy, want).await {
                    Ok(units) => units,
                    // `ON_STORE_ERROR=closed`: denied until the store is back; else
                    // nothing, and Envoy's assignment expires into its own behaviour.
                    Err(_) if service.inner.on_error == Some(OnStoreError::Deny) => 0,
                    Err(_) => return None,
                };
                if let Some(stats) = &self.stats {
                    stats.assigned(&family, units, usage.num_requests_allowed);
                }
                match grant::max_tokens_for(units) {
                    0 => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
                    max_tokens => {
                        state.generation = state.generation.wrapping_add(1);
                        state.reserved = Some(Reservation {
                            window: grant::window_of(&policy, now),
                            key: store_key,
                            policy,
                            units,
                        });
                        Strategy::TokenBucket(grant::token_bucket(max_tokens, state.generation))
                    }
                }
            }
        };
        Some(assignment(&key, strategy, ASSIGNMENT_TTL_SECS))
    }

    /// A zero-TTL `ALLOW_ALL` for every bucket, sent before the server stops: each Envoy falls
    /// back at once to its `expired_assignment_behavior`.
    pub(crate) fn expire_all(&self) -> RateLimitQuotaResponse {
        let allow = Strategy::BlanketRule(BlanketRule::AllowAll as i32);
        RateLimitQuotaResponse {
            bucket_action: (self.buckets.keys())
                .map(|key| assignment(key, allow, 0))
                .collect(),
        }
    }
}

fn action(key: &BucketKey, action: bucket_action::BucketAction) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket_id(key)),
        bucket_action: Some(action),
    }
}

fn assignment(key: &BucketKey, strategy: Strategy, ttl_secs: u32) -> BucketAction {
    let assignment = QuotaAssignmentAction {
        assignment_time_to_live: Some(ProtoDuration {
            seconds: i64::from(ttl_secs),
            nanos: 0,
        }),
        rate_limit_strategy: Some(RateLimitStrategy {
            strategy: Some(strategy),
        }),
    };
    action(
        key,
        bucket_action::BucketAction::QuotaAssignmentAction(assignment),
    )
}
