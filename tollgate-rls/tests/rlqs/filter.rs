//! A client that acts as Envoy's `rate_limit_quota` filter does, written from Envoy's source
//! (`source/extensions/filters/http/rate_limit_quota/`, envoyproxy/envoy at 0b55961):
//!
//! - `global_client_impl.cc`, `createBucketImpl`: the first request of a new bucket is decided
//!   by `no_assignment_behavior` (allow all when unset), opens the stream if it is not open,
//!   and is reported at once, alone, with `time_elapsed` 0 s (`getUsageFromBucket`: whole
//!   seconds since the bucket's last report).
//! - `startSendReportsTimerImpl`, `onSendReportsTimer`: every bucket is reported each period
//!   (Envoy's is 5 s, filter_persistence.cc), idle ones with 0 and 0; a closed stream is
//!   reopened at the next tick.
//! - `onQuotaResponseImpl`: an action for an unknown bucket is ignored; `blanket_rule` and
//!   `token_bucket` apply, `requests_per_time_unit` and a missing strategy are ignored; a
//!   token bucket is kept when `max_tokens`, `tokens_per_fill` and the nanoseconds of
//!   `fill_interval` are unchanged (`protoTokenBucketsEq`), else a new one starts full
//!   (`AtomicTokenBucketImpl`, `init_fill`) with `tokens_per_fill / whole seconds` per second
//!   (`createTokenBucketFromAction`); `abandon_action` erases the bucket.
//! - `startActionExpirationTimer`: the assignment expires after its TTL's whole seconds; then
//!   `expired_assignment_behavior` (allow all when unset) applies.
#![allow(unreachable_pub, dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::r#type::v3::TokenBucket;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// A bucket's sorted entries.
pub type Key = Vec<(String, String)>;

pub fn bucket_id(key: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: (key.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn key_of(id: &BucketId) -> Key {
    let mut key: Key = id
        .bucket
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    key.sort();
    key
}

/// What an assignment makes the bucket do.
#[derive(Debug, Clone)]
pub enum Applied {
    Blanket(BlanketRule),
    Tokens { spec: TokenBucket, bucket: Tokens },
}

/// Envoy's `AtomicTokenBucketImpl`: starts full, refills continuously.
#[derive(Debug, Clone)]
pub struct Tokens {
    max: f64,
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Tokens {
    fn new(spec: &TokenBucket) -> Self {
        let secs = spec.fill_interval.map_or(0, |d| d.seconds);
        let per_fill = spec.tokens_per_fill.map_or(0, |v| v.value) as f64;
        let rate = match secs {
            // Under 1 s: a division by zero, an unlimited rate.
            0 => f64::INFINITY,
            s => per_fill / s as f64,
        };
        Self {
            max: spec.max_tokens as f64,
            rate,
            tokens: spec.max_tokens as f64,
            at: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = self.rate * now.duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + refill).min(self.max);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Debug)]
struct Bucket {
    allowed: u64,
    denied: u64,
    last_report: Instant,
    action: Option<(Applied, Instant)>,
}

/// Everything the client saw, for the tests.
#[derive(Debug, Default)]
pub struct Seen {
    pub responses: Vec<RateLimitQuotaResponse>,
    /// The stream's end: `Some(status)` when it ended with an error.
    pub ended: Option<Option<tonic::Status>>,
}

#[derive(Debug, Default)]
struct State {
    buckets: HashMap<Key, Bucket>,
    seen: Seen,
}

/// One Envoy's filter: its bucket cache and its stream.
pub struct Filter {
    domain: String,
    /// The cluster's endpoints: a reopened stream goes to the next one.
    clients: Vec<RateLimitQuotaServiceClient<Channel>>,
    next: usize,
    state: Arc<Mutex<State>>,
    stream: Option<mpsc::Sender<RateLimitQuotaUsageReports>>,
    /// `expired_assignment_behavior` / `no_assignment_behavior`: allow all when unset.
    pub expired_allows: bool,
    /// Streams opened so far (more than one: a broken stream was reopened).
    opened: usize,
}

impl Filter {
    pub fn new(channel: Channel, domain: &str) -> Self {
        Self::over(vec![channel], domain)
    }

    /// A filter whose cluster has these endpoints, in order: a stream that broke is reopened
    /// on the next one.
    pub fn over(channels: Vec<Channel>, domain: &str) -> Self {
        Self {
            domain: domain.to_owned(),
            clients: channels
                .into_iter()
                .map(RateLimitQuotaServiceClient::new)
                .collect(),
            next: 0,
            state: Arc::default(),
            stream: None,
            expired_allows: true,
            opened: 0,
        }
    }

    /// Opens the stream if it is not open (or was closed by the server).
    async fn ensure_stream(&mut self) {
        if self.stream.as_ref().is_some_and(|s| !s.is_closed())
            && self.state.lock().unwrap().seen.ended.is_none()
        {
            return;
        }
        self.state.lock().unwrap().seen.ended = None;
        self.opened += 1;
        let (tx, rx) = mpsc::channel(16);
        let outbound = tokio_stream::wrappers::ReceiverStream::new(rx);
        let mut client = self.clients[self.next % self.clients.len()].clone();
        self.next += 1;
        let state = Arc::clone(&self.state);
        self.stream = Some(tx);
        tokio::spawn(async move {
            let mut inbound = match client.stream_rate_limit_quotas(outbound).await {
                Ok(response) => response.into_inner(),
                Err(status) => {
                    state.lock().unwrap().seen.ended = Some(Some(status));
                    return;
                }
            };
            loop {
                match inbound.message().await {
                    Ok(Some(response)) => apply(&state, response),
                    Ok(None) => {
                        state.lock().unwrap().seen.ended = Some(None);
                        return;
                    }
                    Err(status) => {
                        state.lock().unwrap().seen.ended = Some(Some(status));
                        return;
                    }
                }
            }
        });
    }

    async fn send(&mut self, report: RateLimitQuotaUsageReports) {
        self.ensure_stream().await;
        if let Some(tx) = &self.stream {
            let _ = tx.send(report).await;
        }
    }

    /// Sends a report as it is (for malformed ones).
    pub async fn send_raw(&mut self, report: RateLimitQuotaUsageReports) {
        self.send(report).await;
    }

    /// One request matched into `bucket`: whether it is allowed.
    pub async fn request(&mut self, bucket: &[(&str, &str)]) -> bool {
        let id = bucket_id(bucket);
        let key = key_of(&id);
        let (allowed, first) = {
            let mut state = self.state.lock().unwrap();
            match state.buckets.get_mut(&key) {
                None => {
                    let allowed = true; // no_assignment_behavior unset: allow all.
                    state.buckets.insert(
                        key.clone(),
                        Bucket {
                            allowed: 0,
                            denied: 0,
                            last_report: Instant::now(),
                            action: None,
                        },
                    );
                    (allowed, true)
                }
                Some(b) => {
                    let allowed = match &mut b.action {
                        None => true,
                        Some((_, expires)) if Instant::now() >= *expires => self.expired_allows,
                        Some((Applied::Blanket(rule), _)) => *rule == BlanketRule::AllowAll,
                        Some((Applied::Tokens { bucket, .. }, _)) => bucket.take(),
                    };
                    match allowed {
                        true => b.allowed += 1,
                        false => b.denied += 1,
                    }
                    (allowed, false)
                }
            }
        };
        if first {
            // Reported at once, alone, with time_elapsed 0 s.
            let usage = BucketQuotaUsage {
                bucket_id: Some(id),
                time_elapsed: Some(ProtoDuration {
                    seconds: 0,
                    nanos: 0,
                }),
                num_requests_allowed: u64::from(allowed),
                num_requests_denied: u64::from(!allowed),
            };
            let report = RateLimitQuotaUsageReports {
                domain: self.domain.clone(),
                bucket_quota_usages: vec![usage],
            };
            self.state
                .lock()
                .unwrap()
                .buckets
                .get_mut(&key)
                .unwrap()
                .last_report = Instant::now();
            self.send(report).await;
        }
        allowed
    }

    /// The periodic report of every cached bucket (idle ones with 0 and 0).
    pub async fn report(&mut self) {
        let report = {
            let mut state = self.state.lock().unwrap();
            let now = Instant::now();
            let usages = (state.buckets.iter_mut())
                .map(|(key, b)| {
                    let elapsed = now.duration_since(b.last_report).as_secs() as i64;
                    b.last_report = now;
                    BucketQuotaUsage {
                        bucket_id: Some(BucketId {
                            bucket: key.iter().cloned().collect(),
                        }),
                        time_elapsed: Some(ProtoDuration {
                            seconds: elapsed,
                            nanos: 0,
                        }),
                        num_requests_allowed: std::mem::take(&mut b.allowed),
                        num_requests_denied: std::mem::take(&mut b.denied),
                    }
                })
                .collect();
            RateLimitQuotaUsageReports {
                domain: self.domain.clone(),
                bucket_quota_usages: usages,
            }
        };
        self.send(report).await;
    }

    /// The assignment in force for `bucket`, if any.
    pub fn applied(&self, bucket: &[(&str, &str)]) -> Option<(Applied, Instant)> {
        let key = key_of(&bucket_id(bucket));
        let state = self.state.lock().unwrap();
        state.buckets.get(&key).and_then(|b| b.action.clone())
    }

    /// Whether `bucket` is in the cache (an abandoned one is not).
    pub fn has_bucket(&self, bucket: &[(&str, &str)]) -> bool {
        let key = key_of(&bucket_id(bucket));
        self.state.lock().unwrap().buckets.contains_key(&key)
    }

    /// How many streams this filter opened.
    pub fn streams_opened(&self) -> usize {
        self.opened
    }

    /// Responses received so far.
    pub fn responses(&self) -> usize {
        self.state.lock().unwrap().seen.responses.len()
    }

    /// The last response received.
    pub fn last_response(&self) -> Option<RateLimitQuotaResponse> {
        self.state.lock().unwrap().seen.responses.last().cloned()
    }

    /// How the stream ended, if it did.
    pub fn ended(&self) -> Option<Option<tonic::Status>> {
        self.state.lock().unwrap().seen.ended.clone()
    }

    /// Waits until `n` responses came (at most `within`).
    pub async fn wait_responses(&self, n: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.responses() >= n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }
}

/// `onQuotaResponseImpl`, then the TTL timer.
fn apply(state: &Mutex<State>, response: RateLimitQuotaResponse) {
    let mut state = state.lock().unwrap();
    for action in &response.bucket_action {
        let Some(id) = action.bucket_id.as_ref().filter(|id| !id.bucket.is_empty()) else {
            continue;
        };
        let key = key_of(id);
        let Some(bucket) = state.buckets.get_mut(&key) else {
            continue;
        };
        match &action.bucket_action {
            Some(Action::AbandonAction(_)) => {
                state.buckets.remove(&key);
            }
            Some(Action::QuotaAssignmentAction(assignment)) => {
                let ttl = assignment
                    .assignment_time_to_live
                    .map_or(0, |d| d.seconds.max(0));
                let expires = Instant::now() + Duration::from_secs(ttl as u64);
                let strategy = assignment.rate_limit_strategy.and_then(|s| s.strategy);
                let applied = match strategy {
                    Some(Strategy::BlanketRule(rule)) => Applied::Blanket(
                        BlanketRule::try_from(rule).unwrap_or(BlanketRule::AllowAll),
                    ),
                    Some(Strategy::TokenBucket(spec)) => {
                        let kept = match &bucket.action {
                            Some((Applied::Tokens { spec: old, bucket }, _))
                                if old.max_tokens == spec.max_tokens
                                    && old.tokens_per_fill.map(|v| v.value)
                                        == spec.tokens_per_fill.map(|v| v.value)
                                    && old.fill_interval.map(|d| d.nanos)
                                        == spec.fill_interval.map(|d| d.nanos) =>
                            {
                                Some(bucket.clone())
                            }
                            _ => None,
                        };
                        let tokens = kept.unwrap_or_else(|| Tokens::new(&spec));
                        Applied::Tokens {
                            spec,
                            bucket: tokens,
                        }
                    }
                    _ => continue,
                };
                bucket.action = Some((applied, expires));
            }
            None => {}
        }
    }
    state.seen.responses.push(response);
}
