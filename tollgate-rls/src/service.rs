//! [`RateLimitService`]: Envoy's `ShouldRateLimit` answered from an [`RlsConfig`] and a store.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
use super::series::{Series, DEFAULT_MAX_SERIES};
use super::source::{ConfigDir, ConfigSource};
use super::stats;
use super::xds::{self, XdsSource, XdsTask};
use tollgate::engine::Stats;
use tollgate::engine::{Charging, Engine, EngineBuilder};
use tollgate::store::{OnStoreError, Store, StoreFailure};
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
    inner: Arc<Inner>,
}

struct Inner {
    config: Arc<ConfigSource>,
    engine: Engine,
    /// How a failing store is answered: `None` is a gRPC error, as the reference answers.
    on_error: Option<OnStoreError>,
    modes: Modes,
    headers: Option<ResponseHeaders>,
    stats: stats::Statistics,
    trace_requests: bool,
    /// The xDS client feeding `config`, if it comes from a control plane; stops with the
    /// service.
    _xds: Option<XdsTask>,
}

impl RateLimitService {
    /// A builder: the configuration (a directory or an [`RlsConfig`]), the store (default: a
    /// new [`MemoryStore`](tollgate::store::MemoryStore)) and what to do when it fails.
    pub fn builder() -> RateLimitServiceBuilder {
        RateLimitServiceBuilder {
            config: None,
            merge_domains: false,
            ignore_dot_files: false,
            serve_before_config: false,
            watch: true,
            store: Engine::builder(),
            on_error: None,
            modes: Modes::default(),
            headers: None,
            max_series: DEFAULT_MAX_SERIES,
            near_limit_ratio: stats::DEFAULT_NEAR_LIMIT_RATIO,
            trace_requests: false,
        }
    }

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
    /// chosen with [`on_store_error`](RateLimitServiceBuilder::on_store_error).
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
        let plan = Plan::new(&config, request, inner.modes);
        let asks = plan.asks();
        let looked = plan.refused_locally();
        // A limit of zero refuses the request without the store; charging every hit, the
        // other limits are charged all the same.
        let looked = looked && inner.modes.charging != Charging::EveryHit;
        let decided = match (asks.is_empty(), looked) {
            (true, _) => Ok(Vec::new()),
            (false, false) => inner.engine.decide(&asks, inner.modes.charging).await,
            (false, true) => inner.engine.look(&asks).await,
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
    /// [`config_xds`](RateLimitServiceBuilder::config_xds), until the control plane's first
    /// set loads, or [`serve_before_config`](RateLimitServiceBuilder::serve_before_config),
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

/// Where the configuration comes from.
#[derive(Debug)]
enum ConfigChoice {
    Fixed(RlsConfig),
    Dir(PathBuf),
    Xds(Box<XdsSource>),
}

/// Builds a [`RateLimitService`]; see [`RateLimitService::builder`].
#[must_use]
pub struct RateLimitServiceBuilder {
    config: Option<ConfigChoice>,
    merge_domains: bool,
    ignore_dot_files: bool,
    serve_before_config: bool,
    watch: bool,
    store: EngineBuilder,
    on_error: Option<OnStoreError>,
    modes: Modes,
    headers: Option<ResponseHeaders>,
    max_series: usize,
    near_limit_ratio: f32,
    trace_requests: bool,
}

impl RateLimitServiceBuilder {
    /// One OpenTelemetry span per `ShouldRateLimit` (default false), as the reference's
    /// `TRACING_ENABLED`, under the trace in the request (`opentelemetry::global`'s provider).
    pub fn trace_requests(mut self, trace: bool) -> Self {
        self.trace_requests = trace;
        self
    }

    /// A configuration that never changes.
    pub fn config(mut self, config: RlsConfig) -> Self {
        self.config = Some(ConfigChoice::Fixed(config));
        self
    }

    /// Every file in `dir` (the reference's `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config`) and
    /// its subdirectories, read at `build` and again within a second of a change. A change
    /// that does not load is logged with its file and the last good configuration stays.
    pub fn config_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config = Some(ConfigChoice::Dir(dir.into()));
        self
    }

    /// Rate limits from an xDS control plane (the reference's `CONFIG_TYPE=GRPC_XDS_SOTW`, as
    /// Envoy Gateway runs it): `RateLimitConfig` resources, each set compiled and checked as
    /// files are, ACKed and put in force, or NACKed with the reason while the last good set
    /// keeps serving. Until the first set loads, requests are answered with the reference's
    /// error ("no rate limit configuration loaded"); [`RateLimitService::wait_for_config`]
    /// waits for it. `build` must run inside a Tokio runtime, where the client runs until
    /// the service is dropped.
    pub fn config_xds(mut self, source: XdsSource) -> Self {
        self.config = Some(ConfigChoice::Xds(Box::new(source)));
        self
    }

    /// With [`config_dir`](Self::config_dir): files that do not load at `build` are logged
    /// and counted instead of an error, and requests are answered as with no configuration
    /// ("no rate limit configuration loaded") until they load, as the reference starts with
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG` (default false).
    pub fn serve_before_config(mut self, serve: bool) -> Self {
        self.serve_before_config = serve;
        self
    }

    /// Merges the descriptors of a domain found in several files instead of refusing them
    /// (the reference's `MERGE_DOMAIN_CONFIG`; default false).
    pub fn merge_domains(mut self, merge: bool) -> Self {
        self.merge_domains = merge;
        self
    }

    /// Skips files whose name starts with `.` (the reference's `RUNTIME_IGNOREDOTFILES`;
    /// default false). Hidden directories, such as Kubernetes' `..data`, are always skipped.
    pub fn ignore_dot_files(mut self, ignore: bool) -> Self {
        self.ignore_dot_files = ignore;
        self
    }

    /// Whether the configuration directory is watched for changes (default true).
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Where state lives (default: a new [`MemoryStore`](tollgate::store::MemoryStore)): a
    /// [`RedisStore`](tollgate::store::RedisStore) shared by every instance of the service, or any
    /// [`Store`] of your own. The service puts the layer's stack around it: the cache of
    /// denials, leases for hot descriptors, and the failure handling of
    /// [`store_failure`](Self::store_failure). Chosen at run time: the builder's type does not
    /// name the store. The built-in stores decide a request's descriptors in one atomic step;
    /// a store of your own is asked for them one by one, in order (not atomically).
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = self.store.store(store);
        self
    }

    /// How a failing store is treated: the timeout, the circuit breaker and an error hook, and
    /// its [`OnStoreError`] policy, which replaces the default answer (a gRPC error) as
    /// [`on_store_error`](Self::on_store_error) does.
    pub fn store_failure(mut self, failure: StoreFailure) -> Self {
        self.on_error = Some(failure.on_store_error());
        self.store = self.store.store_failure(failure);
        self
    }

    /// What to answer while the store fails (an error, a timeout, an open circuit breaker).
    /// By default (not called) the reference's answer: the gRPC error `UNKNOWN` (on `/json`,
    /// 400), so Envoy's `failure_mode_deny` decides: it lets the request through and counts
    /// `ratelimit.error`, or with `failure_mode_deny: true` refuses it. A policy answers
    /// instead: [`OnStoreError::Allow`] OK without numbers, [`OnStoreError::Deny`]
    /// OVER_LIMIT for every limited descriptor, [`OnStoreError::FallbackToMemory`] decides in
    /// this process until the store is back.
    ///
    /// ```
    /// use tollgate_rls::RateLimitService;
    /// use tollgate::store::OnStoreError;
    ///
    /// let reference = RateLimitService::builder(); // a gRPC error
    /// let local = RateLimitService::builder().on_store_error(OnStoreError::FallbackToMemory);
    /// # let _ = (reference, local);
    /// ```
    pub fn on_store_error(mut self, on_store_error: OnStoreError) -> Self {
        self.on_error = Some(on_store_error);
        self.store = self.store.on_store_error(on_store_error);
        self
    }

    /// Whether denials are cached (default true): a descriptor the store refused is refused
    /// here until its `Retry-After` without asking the store again; as the layer's
    /// [`denial_cache`](tollgate::RateLimitLayerBuilder::denial_cache). Only requests charged
    /// [`Charging::AllowedOnly`] are answered from it: the reference's modes charge refused
    /// hits too, so every one of them goes to the store.
    pub fn denial_cache(mut self, enabled: bool) -> Self {
        self.store = self.store.denial_cache(enabled);
        self
    }

    /// The longest a decision waits for the store (default 50 ms): shorthand for
    /// [`StoreFailure::timeout`].
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store = self.store.store_timeout(timeout);
        self
    }

    /// Which hits are charged to a request's descriptors (default [`Charging::EveryHit`],
    /// as the reference): see [`Charging`].
    pub fn charging(mut self, charging: Charging) -> Self {
        self.modes.charging = charging;
        self
    }

    /// Answers OK even when a limit is over, while deciding and counting as usual (the
    /// reference's `SHADOW_MODE`).
    pub fn shadow_mode(mut self, shadow: bool) -> Self {
        self.modes.shadow = shadow;
        self
    }

    /// Treats every limit as a quota: the request is refused only when all its quotas are
    /// over (the reference's `QUOTA_MODE`).
    pub fn quota_mode(mut self, quota: bool) -> Self {
        self.modes.quota = quota;
        self
    }

    /// Sends dynamic metadata with every answer (the reference's `RESPONSE_DYNAMIC_METADATA`):
    /// the request's domain, descriptors and hits, and the YAML `metadata` of the limits it
    /// passed, which Envoy keeps under `envoy.filters.http.ratelimit` for later filters and
    /// access logs.
    pub fn response_dynamic_metadata(mut self, send: bool) -> Self {
        self.modes.dynamic_metadata = send;
        self
    }

    /// Adds the limit, remaining and reset of the descriptor closest to its limit as headers
    /// for the client (the reference's `LIMIT_RESPONSE_HEADERS_ENABLED`).
    pub fn response_headers(mut self, headers: ResponseHeaders) -> Self {
        self.headers = Some(headers);
        self
    }

    /// How many statistics series request values may make (default 1,000): a
    /// `detailed_metric` or `value_to_metric` limit and Envoy's own limits count under a
    /// series per value, and clients choose the values. Past this many, their hits are
    /// counted in one series labelled `overflow="true"`.
    pub fn stats_max_series(mut self, max: usize) -> Self {
        self.max_series = max;
        self
    }

    /// The share of a limit past which hits also count as near it (the reference's
    /// `NEAR_LIMIT_RATIO`; default 0.8): only the hits past `floor(limit × ratio)` count.
    pub fn near_limit_ratio(mut self, ratio: f32) -> Self {
        self.near_limit_ratio = ratio;
        self
    }
}

impl RateLimitServiceBuilder {
    /// Loads the configuration and builds the service; any problem with the configuration
    /// (naming its file) or a setting is an error here.
    pub fn build(self) -> Result<RateLimitService, ConfigError> {
        let mut store = self.store;
        if self.on_error.is_none() {
            // No fallback: every failure is answered as an error.
            store = store.on_store_error(OnStoreError::Deny);
        }
        let engine = store.build()?;
        if self.near_limit_ratio.is_nan() || self.near_limit_ratio < 0.0 {
            return Err(ConfigError::new(
                "near_limit_ratio must be a number from 0 up",
            ));
        }
        let mut xds_task = None;
        let config = match self.config {
            None => return Err(ConfigError::new(
                "no configuration: set .config_dir(..), .config_xds(..) or .config(RlsConfig::from_yaml(..)?)",
            )),
            Some(ConfigChoice::Fixed(config)) => ConfigSource::fixed(config),
            Some(ConfigChoice::Dir(path)) => ConfigSource::open(
                ConfigDir {
                    path,
                    merge_domains: self.merge_domains,
                    ignore_dot_files: self.ignore_dot_files,
                },
                self.serve_before_config,
            )?,
            Some(ConfigChoice::Xds(source)) => {
                let config = ConfigSource::fed();
                xds_task = Some(xds::spawn(*source, &config, self.merge_domains)?);
                config
            }
        };
        if self.watch {
            config.watch();
        }
        Ok(RateLimitService {
            inner: Arc::new(Inner {
                config,
                engine,
                on_error: self.on_error,
                modes: self.modes,
                headers: self.headers,
                stats: stats::Statistics {
                    series: Series::new(self.max_series),
                    near_limit_ratio: self.near_limit_ratio,
                    calls: stats::CallMetrics::default(),
                },
                trace_requests: self.trace_requests,
                _xds: xds_task,
            }),
        })
    }
}

impl fmt::Debug for RateLimitServiceBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitServiceBuilder")
            .field("config", &self.config)
            .field("store", &self.store)
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}
