//! The [`RateLimitServiceBuilder`]: where the configuration comes from, the store and what a
//! failing one answers, the charging modes and what an answer carries.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::config::RlsConfig;
use super::plan::Modes;
use super::response::ResponseHeaders;
use super::series::{Series, DEFAULT_MAX_SERIES};
use super::service::{Inner, RateLimitService};
use super::source::{ConfigDir, ConfigSource};
use super::stats;
use super::xds::{self, XdsSource};
use tollgate::engine::{Charging, Engine, EngineBuilder};
use tollgate::store::{OnStoreError, Store, StoreFailure};
use tollgate::ConfigError;

impl RateLimitService {
    /// A builder: the configuration (a directory or an [`RlsConfig`]), the store (default: a
    /// new [`MemoryStore`](tollgate::store::MemoryStore)) and what to do when it fails.
    pub fn builder() -> RateLimitServiceBuilder {
        RateLimitServiceBuilder::new()
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
    pub(crate) modes: Modes,
    /// The reference's `CACHE_KEY_PREFIX` (see `counting.rs`).
    pub(crate) cache_key_prefix: String,
    headers: Option<ResponseHeaders>,
    max_series: usize,
    near_limit_ratio: f32,
    trace_requests: bool,
}

impl RateLimitServiceBuilder {
    /// The defaults of [`RateLimitService::builder`].
    pub(crate) fn new() -> Self {
        Self {
            config: None,
            merge_domains: false,
            ignore_dot_files: false,
            serve_before_config: false,
            watch: true,
            store: Engine::builder(),
            on_error: None,
            modes: Modes::default(),
            cache_key_prefix: String::new(),
            headers: None,
            max_series: DEFAULT_MAX_SERIES,
            near_limit_ratio: stats::DEFAULT_NEAR_LIMIT_RATIO,
            trace_requests: false,
        }
    }
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
                cache_key_prefix: self.cache_key_prefix,
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
