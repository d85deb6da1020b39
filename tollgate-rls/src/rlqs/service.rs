//! [`RateLimitQuotaService`]: Envoy's Rate Limit Quota Service over the configuration and
//! store of a [`RateLimitService`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService as RlqsTrait, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::bounds::{MAX_STREAMS, RESPONSES_QUEUED};
use super::stream::StreamState;
use crate::limits::MAX_REQUEST_BYTES;
use crate::service::RateLimitService;

/// How long a bucket may report no request before it is abandoned, by default.
pub const DEFAULT_ABANDON_AFTER: Duration = Duration::from_secs(60);

/// Envoy's Rate Limit Quota Service
/// (`envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas`), from
/// the same configuration and store as a [`RateLimitService`]: a stream's `domain` is the
/// YAML domain, and a bucket `{k: v}` is the descriptor entry `k`=`v` (several keys: entries
/// sorted by key). Each bucket's quota is taken from the store, so the limit holds across
/// instances; see the [guide](crate::guide) for the Envoy side.
///
/// ```
/// use tollgate_rls::{RateLimitQuotaService, RateLimitService, RlsConfig};
///
/// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
/// let yaml = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: minute, requests_per_unit: 600 }\n";
/// let service = RateLimitService::builder()
///     .config(RlsConfig::from_yaml([("edge.yaml", yaml)], tollgate_rls::DuplicateDomains::Refuse)?)
///     .build()?;
/// let quotas = RateLimitQuotaService::new(&service);
/// tonic::transport::Server::builder()
///     .add_service(service.into_server())
///     .add_service(quotas.into_server())
///     .serve("127.0.0.1:8081".parse()?)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimitQuotaService {
    rls: RateLimitService,
    shared: Arc<Shared>,
}

struct Shared {
    streams: Arc<Semaphore>,
    stop: watch::Sender<bool>,
    abandon_after: Duration,
}

impl fmt::Debug for RateLimitQuotaService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitQuotaService")
            .field(
                "streams",
                &(MAX_STREAMS - self.shared.streams.available_permits()),
            )
            .field("abandon_after", &self.shared.abandon_after)
            .finish_non_exhaustive()
    }
}

impl RateLimitQuotaService {
    /// The service over `rls`'s configuration (files or xDS, reloaded as they change) and
    /// store.
    pub fn new(rls: &RateLimitService) -> Self {
        Self::with_abandon_after(rls, DEFAULT_ABANDON_AFTER)
    }

    /// As [`new`](Self::new), abandoning a bucket (`AbandonAction`: Envoy forgets it) once it
    /// has reported no request for `abandon_after`.
    pub fn with_abandon_after(rls: &RateLimitService, abandon_after: Duration) -> Self {
        Self {
            rls: rls.clone(),
            shared: Arc::new(Shared {
                streams: Arc::new(Semaphore::new(MAX_STREAMS)),
                stop: watch::Sender::new(false),
                abandon_after,
            }),
        }
    }

    /// The tonic server for this service, refusing a message larger than
    /// [`MAX_REQUEST_BYTES`](crate::MAX_REQUEST_BYTES).
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    /// Before the server stops: sends every stream a zero-TTL assignment for each of its
    /// buckets (each Envoy falls back to its `expired_assignment_behavior` at once), ends the
    /// streams and refuses new ones; resolves once every stream has ended, or after `wait`.
    pub async fn shutdown(&self, wait: Duration) {
        self.shared.stop.send_replace(true);
        let all = u32::try_from(MAX_STREAMS).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(wait, self.shared.streams.acquire_many(all)).await;
    }
}

#[tonic::async_trait]
impl RlqsTrait for RateLimitQuotaService {
    type StreamRateLimitQuotasStream = ReceiverStream<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        if *self.shared.stop.borrow() {
            return Err(Status::unavailable(
                "the rate limit quota service is stopping",
            ));
        }
        let permit = Arc::clone(&self.shared.streams)
            .try_acquire_owned()
            .map_err(|_| {
                Status::resource_exhausted(format!("RLQS streams: over the limit of {MAX_STREAMS}"))
            })?;
        let (tx, rx) = mpsc::channel(RESPONSES_QUEUED);
        let this = self.clone();
        let reports = request.into_inner();
        tokio::spawn(async move {
            this.run(reports, tx).await;
            drop(permit);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

type Sender = mpsc::Sender<Result<RateLimitQuotaResponse, Status>>;

impl RateLimitQuotaService {
    /// Answers a stream's reports until it ends, fails, or the service stops.
    async fn run(&self, mut reports: Streaming<RateLimitQuotaUsageReports>, tx: Sender) {
        let mut state = StreamState::new(self.shared.abandon_after);
        let mut stop = self.shared.stop.subscribe();
        loop {
            let report = tokio::select! {
                _ = stop.wait_for(|stop| *stop) => {
                    let _ = tx.try_send(Ok(state.expire_all()));
                    return;
                }
                () = tx.closed() => return,
                report = reports.message() => report,
            };
            let report = match report {
                Ok(Some(report)) => report,
                Ok(None) | Err(_) => return,
            };
            match state.answer(&self.rls, report).await {
                // A client that does not read keeps at most RESPONSES_QUEUED answers: a newer
                // one is dropped, and the next report gets a fresh one.
                Ok(answer) => {
                    if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(Ok(answer)) {
                        return;
                    }
                }
                Err(status) => {
                    let send = tx.send(Err(status));
                    let _ = tokio::time::timeout(Duration::from_secs(1), send).await;
                    return;
                }
            }
        }
    }
}
