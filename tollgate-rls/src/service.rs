//! [`RateLimitService`]: Envoy's `ShouldRateLimit` answered from an [`RlsConfig`] and a store.

use std::fmt;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService as RateLimitServiceTrait, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use super::config::RlsConfig;
use super::limits;
use super::metadata;
use super::plan::{Item, Modes, Plan};
use super::request_span::RequestSpan;
use super::response::{respond, Outcome, ResponseHeaders};
use super::source::ConfigSource;
use super::stats;
use super::xds::XdsTask;
use tollgate::engine::Stats;
use tollgate::engine::{Charging, Engine};
use tollgate::store::OnStoreError;
use tollgate::ConfigError;

/// Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService`), answering
/// `ShouldRateLimit` as the reference implementation does, from its YAML configuration, over
/// any tollgate store: a drop-in for envoyproxy/ratelimit inside your own tonic server.
///
/// A request's descriptors are decided in one atomic step and charged as the reference
/// charges them: every hit by default, refused or not ([`Charging`] has its
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, and tollgate's "a refused request consumes
/// nothing").
///
/// ```
/// use tollgate_rls::{RateLimitService, RlsConfig};
///
/// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
/// let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: second, requests_per_unit: 10 }\n";
/// let service = RateLimitService::builder()
///     .config(RlsConfig::from_yaml([("edge.yaml", yaml)], tollgate_rls::DuplicateDomains::Refuse)?)
///     .build()?;
/// tonic::transport::Server::builder()
///     .add_service(service.into_server())
///     .serve("127.0.0.1:8081".parse()?)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RateLimitService {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Arc<ConfigSource>,
    pub(crate) engine: Engine,
    /// How a failing store is answered: `None` is a gRPC error, as the reference answers.
    pub(crate) on_error: Option<OnStoreError>,
    pub(crate) modes: Modes,
    /// The reference's `CACHE_KEY_PREFIX`, before every key in the reference's layout.
    pub(crate) cache_key_prefix: String,
    pub(crate) headers: Option<ResponseHeaders>,
    pub(crate) stats: stats::Statistics,
    pub(crate) trace_requests: bool,
    /// The xDS client feeding `config`, if it comes from a control plane; stops with the
    /// service.
    pub(crate) _xds: Option<XdsTask>,
}

impl RateLimitService {
    /// The tonic server for this service, to add to a `tonic::transport::Server`. It refuses
    /// a message larger than [`MAX_REQUEST_BYTES`](crate::MAX_REQUEST_BYTES) from its
    /// length, before reading it (tonic's default is 4 MiB).
    pub fn into_server(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self).max_decoding_message_size(limits::MAX_REQUEST_BYTES)
    }

    /// Answers one request, as `ShouldRateLimit` does. An empty domain or no descriptor is
    /// an error, as in the reference; so is a request past one of the [bounds](crate#limits)
    /// ([`MAX_DESCRIPTORS`](crate::MAX_DESCRIPTORS) and the others): `INVALID_ARGUMENT`, naming
    /// the bound and what was sent, before anything is matched or counted. So is a store that
    /// fails (an error, a timeout, an open circuit breaker): `UNKNOWN`, as the reference's,
    /// for Envoy's `failure_mode_deny` to decide, unless an [`OnStoreError`] policy was
    /// chosen with [`on_store_error`](crate::RateLimitServiceBuilder::on_store_error).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            stats::service_error();
            return Err(Status::unknown("rate limit domain must not be empty"));
        }
        if request.descriptors.is_empty() {
            stats::service_error();
            return Err(Status::unknown(
                "rate limit descriptor list must not be empty",
            ));
        }
        limits::check(request)?;
        let inner = &self.inner;
        if !inner.config.loaded() {
            // The reference's `checkServiceErr(snappedConfig != nil, ..)`: a serviceError,
            // counted, which gRPC sends as UNKNOWN.
            stats::service_error();
            return Err(Status::unknown("no rate limit configuration loaded"));
        }
        let config = inner.config.current();
        if !config.has_domain(&request.domain) {
            // Once per descriptor, as the reference's `GetLimit` counts it.
            stats::domain_not_found(request.descriptors.len());
        }
        let plan = Plan::new(&config, request, inner.modes, &inner.cache_key_prefix);
        let asks = plan.asks();
        let looked = plan.refused_locally();
        // A limit of zero refuses the request without the store; charging every hit, the
        // other limits are charged all the same.
        let looked = looked && inner.modes.charging != Charging::EveryHit;
        // Decided at once when the store can (memory); else on the store's own future, boxed
        // so that this one stays small on the path that does not wait.
        let decided = match (asks.is_empty(), looked) {
            (true, _) => Ok(Vec::new()),
            (false, false) => match inner.engine.decide_now(&asks, inner.modes.charging) {
                Some(decisions) => Ok(decisions),
                None => Box::pin(inner.engine.decide(&asks, inner.modes.charging)).await,
            },
            (false, true) => Box::pin(inner.engine.look(&asks)).await,
        };
        let outcome = match decided {
            Ok(decisions) => Outcome::Decided { decisions, looked },
            Err(error) => {
                stats::store_error();
                match inner.on_error {
                    // A plain Go error in the reference: UNKNOWN (ratelimit.go:425-428).
                    None => return Err(Status::unknown(format!("rate limit store: {error}"))),
                    Some(OnStoreError::Deny) => Outcome::FailedClosed,
                    Some(_) => Outcome::FailedOpen,
                }
            }
        };
        let mut answer = respond(&plan, &outcome, inner.modes, inner.headers.as_ref());
        if inner.modes.dynamic_metadata {
            let statuses = &answer.response.statuses;
            answer.response.dynamic_metadata = Some(metadata::of_answer(request, &plan, statuses));
        }
        inner.stats.record(&plan, &answer);
        if answer.shadowed {
            stats::global_shadow_mode();
        }
        let shadow_limit_over = (plan.items.iter().zip(&answer.over))
            .any(|(item, &over)| matches!(item, Item::Limited(l) if over && l.limit.shadow_mode));
        if answer.shadowed || shadow_limit_over {
            inner.engine.count_shadow_denial();
        }
        Ok(answer.response)
    }

    /// Reads the configuration directory now and swaps in what it holds; on error the
    /// configuration in force stays and the error says which file is wrong. Without a
    /// directory it does nothing. (The directory is also watched: changes apply within a
    /// second without calling this.)
    pub fn reload(&self) -> Result<(), ConfigError> {
        self.inner.config.reload()
    }

    /// The configuration in force (empty while none is loaded).
    pub fn config(&self) -> Arc<RlsConfig> {
        self.inner.config.current()
    }

    /// Whether a configuration is loaded. Always true but for a service configured by
    /// [`config_xds`](crate::RateLimitServiceBuilder::config_xds), until the control plane's first
    /// set loads, or [`serve_before_config`](crate::RateLimitServiceBuilder::serve_before_config),
    /// until its files load; until then every request is answered with an error, as the
    /// reference does.
    pub fn config_loaded(&self) -> bool {
        self.inner.config.loaded()
    }

    /// Resolves once a configuration is loaded (at once but for an xDS-configured service).
    pub async fn wait_for_config(&self) {
        self.inner.config.wait_loaded().await;
    }

    /// The service's figures now, as a layer's [`Control::stats`](tollgate::Control::stats) gives
    /// them: failed store calls (errors, timeouts, calls refused while the circuit breaker was
    /// open), whether the breaker is open, decisions the cache of denials answered, and
    /// requests answered OK although a limit was over (a `shadow_mode` limit, or the global
    /// shadow mode). (The reference's statistics go to your
    /// metrics recorder.)
    pub fn stats(&self) -> Stats {
        self.inner.engine.stats()
    }
}

#[tonic::async_trait]
impl RateLimitServiceTrait for RateLimitService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let timer = stats::CallTimer::start(&self.inner.stats.calls);
        let _span = RequestSpan::start_if(self.inner.trace_requests, &request);
        let answer = self.decide(request.get_ref()).await;
        timer.finish();
        answer.map(Response::new)
    }
}

impl fmt::Debug for RateLimitService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitService")
            .field("config", &self.inner.config)
            .field("engine", &self.inner.engine)
            .field("on_error", &self.inner.on_error)
            .field("modes", &self.inner.modes)
            .field("headers", &self.inner.headers)
            .finish()
    }
}
