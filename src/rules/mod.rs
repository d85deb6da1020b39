//! Rules: per-route, stacked limits with cost, tiers and modes, from code or a TOML file.
//!
//! A [`Rule`] is a named quota that applies to the requests its methods and path match. Every
//! matching rule must allow a request; a request denied by one rule consumes nothing from the
//! others.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderName, Method};

use crate::algorithm::{Algorithm, Params};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::KeyExtractor;
use crate::quota::{check_policy_name, Policy, Quota};

mod cost;
mod file;
mod index;
mod route;
mod set;
mod source;
pub(crate) use cost::{Cost, CostFn};
pub(crate) use file::parse as parse_file;
pub(crate) use route::{parse_methods, Route};
pub(crate) use set::RuleSet;
pub(crate) use source::RuleSource;

/// How a rule treats a request over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Deny it (429). The default.
    #[default]
    Enforce,
    /// Let it through, but count and log the would-be denial; headers still report the limit.
    /// For rolling out a new limit safely.
    Shadow,
    /// Queue it, leaky-bucket style: requests within the burst go at once; a request past it
    /// waits until its slot (the moment it would otherwise be told to retry at), so the excess
    /// leaves at a steady rate; one that would wait longer than `max_delay` is denied at once.
    /// A connection is never held longer than `max_delay`. With `burst = 1` every request is
    /// spaced by `period / limit`.
    Delay,
}

impl std::str::FromStr for Mode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enforce" => Ok(Mode::Enforce),
            "shadow" => Ok(Mode::Shadow),
            "delay" => Ok(Mode::Delay),
            other => Err(ConfigError::of(
                ConfigErrorKind::Rule,
                format!("unknown mode {other:?} (use enforce, shadow or delay)"),
            )),
        }
    }
}

/// Picks the quota for a client key (tiers); `None` means the rule's own quota.
pub(crate) type TierFn = Arc<dyn Fn(&str) -> Option<Quota> + Send + Sync>;

/// A named limit for the requests its methods and path match.
///
/// Settings left out (algorithm, key) come from the layer's builder, then from the defaults
/// (GCRA, [`key::PeerIp`](crate::key::PeerIp)).
///
/// ```
/// use std::time::Duration;
/// use http::Method;
/// use tollgate::{key, rules::{Mode, Rule}, Quota, RateLimitLayer};
///
/// let layer = RateLimitLayer::builder()
///     .key(key::Header::new("x-api-key").or(key::PeerIp::default()))
///     .rule(Rule::new("login", Quota::per_minute(5)).methods([Method::POST]).path("/login")
///         .key(key::PeerIp::default()))
///     .rule(Rule::new("api", "100/s; burst=200".parse()?).path("/api/*").cost_header("x-cost"))
///     .rule(Rule::new("api-daily", Quota::per_day(100_000)).path("/api/*"))
///     .rule(Rule::new("export", Quota::per_second(2)).path("/export")
///         .mode(Mode::Delay).max_delay(Duration::from_secs(2)))
///     .skip_path("/health")
///     .build()?;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Rule {
    name: String,
    quota: Quota,
    algorithm: Option<Algorithm>,
    key: Option<Arc<dyn KeyExtractor>>,
    methods: Vec<Method>,
    path: Option<String>,
    cost: CostSpec,
    max_cost: Option<u32>,
    mode: Mode,
    max_delay: Option<Duration>,
    quota_for: Option<TierFn>,
}

/// A rule's cost as configured; checked by `compile`.
#[derive(Clone)]
enum CostSpec {
    One,
    Header(String),
    Fn(CostFn),
}

impl fmt::Debug for CostSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostSpec::One => f.write_str("One"),
            CostSpec::Header(h) => f.debug_tuple("Header").field(h).finish(),
            CostSpec::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

impl Rule {
    /// A rule named `name` (shown in `RateLimit-Policy`, part of store keys) allowing `quota`
    /// for every request, until narrowed by [`methods`](Self::methods) and
    /// [`path`](Self::path).
    pub fn new(name: impl Into<String>, quota: Quota) -> Self {
        Self {
            name: name.into(),
            quota,
            algorithm: None,
            key: None,
            methods: Vec::new(),
            path: None,
            cost: CostSpec::One,
            max_cost: None,
            mode: Mode::Enforce,
            max_delay: None,
            quota_for: None,
        }
    }

    /// The algorithm (default: the builder's, else GCRA).
    #[must_use]
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = Some(algorithm);
        self
    }

    /// How this rule keys requests (default: the builder's key, else the peer IP).
    #[must_use]
    pub fn key(mut self, key: impl KeyExtractor) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Only requests with one of these methods (default: any).
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Only requests whose path matches: exact (`"/login"`) or a prefix (`"/api/*"` matches
    /// `/api` and everything under `/api/`). Default: any path.
    #[must_use]
    pub fn path(mut self, pattern: impl Into<String>) -> Self {
        self.path = Some(pattern.into());
        self
    }

    /// Reads each request's cost from this header (a whole number ≥ 1; above
    /// [`max_cost`](Self::max_cost) it is clamped; anything else is a 400).
    #[must_use]
    pub fn cost_header(mut self, name: impl Into<String>) -> Self {
        self.cost = CostSpec::Header(name.into());
        self
    }

    /// Computes each request's cost (clamped to `1..=max_cost`).
    #[must_use]
    pub fn cost<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Parts) -> u32 + Send + Sync + 'static,
    {
        self.cost = CostSpec::Fn(Arc::new(cost));
        self
    }

    /// The most one request may cost (default: the rule's capacity, its burst or limit).
    #[must_use]
    pub fn max_cost(mut self, max: u32) -> Self {
        self.max_cost = Some(max);
        self
    }

    /// Enforce (default), shadow, or delay.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The longest a request may wait in [`Mode::Delay`] (ignored in the other modes).
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = Some(max_delay);
        self
    }

    /// Picks a quota per client key (tiers: free vs paid). `None` keeps the rule's quota. The
    /// closure sees the key as extracted, before long keys are digested.
    ///
    /// ```
    /// use tollgate::{key, rules::Rule, Quota};
    ///
    /// let rule = Rule::new("api", Quota::per_minute(60))
    ///     .key(key::Header::new("x-api-key"))
    ///     .quota_for(|key| key.starts_with("paid-").then(|| Quota::per_minute(6000)));
    /// ```
    #[must_use]
    pub fn quota_for<F>(mut self, tiers: F) -> Self
    where
        F: Fn(&str) -> Option<Quota> + Send + Sync + 'static,
    {
        self.quota_for = Some(Arc::new(tiers));
        self
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the rule and fixes its defaults.
    pub(crate) fn compile(
        &self,
        default_key: &Arc<dyn KeyExtractor>,
        default_algorithm: Algorithm,
    ) -> Result<CompiledRule, ConfigError> {
        self.check(default_key, default_algorithm)
            .map_err(|(_, e)| e.context(format!("rule {:?}", self.name)))
    }

    /// [`compile`](Self::compile), with the setting an error is about, so a rules file can
    /// point at it.
    pub(crate) fn check(
        &self,
        default_key: &Arc<dyn KeyExtractor>,
        default_algorithm: Algorithm,
    ) -> Result<CompiledRule, (Setting, ConfigError)> {
        let at = |setting: Setting| move |e: ConfigError| (setting, e);
        check_policy_name(&self.name).map_err(at(Setting::Name))?;
        self.quota.validate().map_err(at(Setting::Quota))?;
        let cost = match &self.cost {
            CostSpec::One => Cost::One,
            CostSpec::Fn(f) => Cost::Fn(Arc::clone(f)),
            CostSpec::Header(name) => {
                Cost::Header(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    let message = format!("cost_header {name:?} is not a valid header name");
                    (
                        Setting::CostHeader,
                        ConfigError::of(ConfigErrorKind::Rule, message),
                    )
                })?)
            }
        };
        let algorithm = self.algorithm.unwrap_or(default_algorithm);
        let route =
            Route::new(self.methods.clone(), self.path.as_deref()).map_err(at(Setting::Path))?;
        let shape = Shape::new(self.mode, algorithm, self.max_delay).map_err(at(Setting::Mode))?;
        // The quota is valid alone: what fails here is the quota with the algorithm, or in
        // delay mode the queue that max_delay adds.
        let policy = shape
            .policy(&self.name, self.quota)
            .map_err(at(match self.mode {
                Mode::Delay => Setting::Mode,
                _ => Setting::Quota,
            }))?;
        let max_cost = self.max_cost.unwrap_or(self.quota.capacity());
        if max_cost == 0 {
            return Err((
                Setting::MaxCost,
                ConfigError::of(ConfigErrorKind::Rule, "max_cost must be at least 1"),
            ));
        }
        Ok(CompiledRule {
            policy,
            quota: self.quota,
            shape,
            key: self.key.clone().unwrap_or_else(|| Arc::clone(default_key)),
            route,
            cost,
            max_cost,
            quota_for: self.quota_for.clone(),
        })
    }
}

/// A rule's setting, to say which one an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setting {
    Name,
    Quota,
    Path,
    Mode,
    CostHeader,
    MaxCost,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("quota", &self.quota)
            .field("algorithm", &self.algorithm)
            .field("key", &self.key.as_ref().map(|k| k.describe()))
            .field("methods", &self.methods)
            .field("path", &self.path)
            .field("cost", &self.cost)
            .field("max_cost", &self.max_cost)
            .field("mode", &self.mode)
            .field("max_delay", &self.max_delay)
            .finish_non_exhaustive()
    }
}

/// A rule's mode with what it needs to turn a quota into a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) mode: Mode,
    algorithm: Algorithm,
    max_delay: Duration,
}

impl Shape {
    fn new(
        mode: Mode,
        algorithm: Algorithm,
        max_delay: Option<Duration>,
    ) -> Result<Self, ConfigError> {
        match (mode, max_delay) {
            (Mode::Delay, None) => {
                return Err(ConfigError::of(
                    ConfigErrorKind::Rule,
                    "mode delay needs max_delay, the longest a request may wait (e.g. \
                     max_delay = \"2s\")",
                ))
            }
            (Mode::Delay, Some(d)) if d.is_zero() => {
                return Err(ConfigError::of(
                    ConfigErrorKind::Rule,
                    "max_delay must be longer than zero",
                ))
            }
            // Ignored outside delay mode, so a rule switches modes by its mode alone.
            _ => {}
        }
        if mode == Mode::Delay && !algorithm.uses_burst() {
            return Err(ConfigError::of(
                ConfigErrorKind::Rule,
                format!(
                    "mode delay queues requests like a leaky bucket; it works with gcra, \
                 token_bucket or leaky_bucket, not {algorithm}"
                ),
            ));
        }
        Ok(Self {
            mode,
            algorithm,
            max_delay: max_delay.unwrap_or_default(),
        })
    }

    /// The policy the store enforces for `quota`. In delay mode it is a leaky bucket whose
    /// queue is longer by the slots that fit in `max_delay`: a request is admitted if its slot
    /// starts within `max_delay`, and then waits for it.
    pub(crate) fn policy(&self, name: &str, quota: Quota) -> Result<Policy, ConfigError> {
        if self.mode != Mode::Delay {
            return Policy::new(name, quota, self.algorithm);
        }
        let params = Params::new(&quota, Algorithm::LeakyBucket);
        let queue = self.queue_slots(&params);
        let burst = u32::try_from(params.burst.saturating_add(queue)).map_err(|_| {
            ConfigError::of(
                ConfigErrorKind::Rule,
                "max_delay is too long for this quota (the queue would be too long)",
            )
        })?;
        Policy::new(name, quota.burst(burst), Algorithm::LeakyBucket)
    }

    /// How many extra slots of `interval` fit in `max_delay`.
    fn queue_slots(&self, params: &Params) -> u64 {
        let max_delay = u64::try_from(self.max_delay.as_micros()).unwrap_or(u64::MAX);
        max_delay / params.interval.max(1)
    }

    /// For a delay-mode decision of the queue policy: how long the request must wait, and the
    /// decision as the rule's own quota sees it (its burst as the limit, queued requests not
    /// counted as remaining).
    pub(crate) fn delay(
        &self,
        quota: &Quota,
        decision: crate::Decision,
    ) -> (Duration, crate::Decision) {
        let params = Params::new(quota, Algorithm::LeakyBucket);
        let queue = self.queue_slots(&params);
        // The leaky bucket's reset_after is the end of the request's last slot plus one interval;
        // its first slot starts `cost` intervals before that. Waiting is needed only past the burst.
        let immediate = params.burst.saturating_mul(params.interval);
        let reset = u64::try_from(decision.reset_after.as_micros()).unwrap_or(u64::MAX);
        let wait = if decision.allowed {
            Duration::from_micros(reset.saturating_sub(immediate))
        } else {
            Duration::ZERO
        };
        let own = crate::Decision {
            limit: params.burst,
            remaining: decision.remaining.saturating_sub(queue),
            ..decision
        };
        (wait.min(self.max_delay), own)
    }
}

/// A rule ready to use: defaults applied, quota validated.
#[derive(Clone)]
pub(crate) struct CompiledRule {
    pub(crate) policy: Policy,
    pub(crate) quota: Quota,
    pub(crate) shape: Shape,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) route: Route,
    pub(crate) cost: Cost,
    pub(crate) max_cost: u32,
    pub(crate) quota_for: Option<TierFn>,
}

impl fmt::Debug for CompiledRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledRule")
            .field("policy", &self.policy)
            .field("shape", &self.shape)
            .field("key", &self.key.describe())
            .field("route", &self.route)
            .field("cost", &self.cost)
            .field("max_cost", &self.max_cost)
            .finish_non_exhaustive()
    }
}
