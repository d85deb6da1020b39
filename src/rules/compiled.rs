//! [`CompiledRule`]: a [`Rule`] checked, with its defaults fixed: what the layer limits by.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderName, HeaderValue};

use super::{
    count_status, Cost, CostSpec, DelayQueue, InFlightRule, Limit, Mode, Priced, QuotaLookup,
    Route, Rule, StatusMatch, TierFn,
};
use crate::algorithm::Algorithm;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::KeyExtractor;
use crate::quota::{check_policy_name, Policy, Quota};
use crate::response;

impl Rule {
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
        let quota = match self.limit {
            Limit::Rate(quota) => quota,
            Limit::InFlight(max) => return self.check_in_flight(max, default_key),
        };
        if self.in_flight_ttl.is_some() {
            return Err((
                Setting::InFlightTtl,
                ConfigError::with_kind(
                    ConfigErrorKind::Rule,
                    "in_flight_ttl applies only to a limit on requests in flight (in_flight);                      remove it",
                ),
            ));
        }
        let (cost, priced) = self.priced().map_err(at(Setting::ResponseCost))?;
        let cost = match &self.cost {
            _ if priced.is_some() => cost,
            CostSpec::One => Cost::One,
            CostSpec::Fn(f) => Cost::Fn(Arc::clone(f)),
            CostSpec::Header(name) => {
                Cost::Header(HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    let message = format!("cost_header {name:?} is not a valid header name");
                    (
                        Setting::CostHeader,
                        ConfigError::with_kind(ConfigErrorKind::Rule, message),
                    )
                })?)
            }
        };
        let algorithm = self.algorithm.unwrap_or(default_algorithm);
        let route =
            Route::new(self.methods.clone(), self.path.as_deref()).map_err(at(Setting::Path))?;
        // Delay mode waits for each request's slot in the store; a lease has no slots.
        if self.lease.is_some() && self.mode == Mode::Delay {
            return Err((
                Setting::Lease,
                ConfigError::with_kind(
                    ConfigErrorKind::Rule,
                    "lease does not work in delay mode, which waits for each request's slot in \
                     the store; remove lease or use mode enforce or shadow",
                ),
            ));
        }
        // max_delay is ignored outside delay mode, so a rule switches modes by its mode alone.
        let delay = match self.mode {
            Mode::Delay => {
                Some(DelayQueue::new(algorithm, self.max_delay).map_err(at(Setting::Mode))?)
            }
            _ => None,
        };
        // The quota is valid alone: what fails here is the quota with the algorithm, or in
        // delay mode the queue that max_delay adds.
        let policy = match &delay {
            Some(queue) => queue.policy(&self.name, quota).map_err(at(Setting::Mode))?,
            None => {
                Policy::new(self.name.as_str(), quota, algorithm).map_err(at(Setting::Quota))?
            }
        };
        let policy = match self.block_for {
            None => policy,
            Some(block_for) => {
                check_block_for(block_for, self.mode).map_err(at(Setting::BlockFor))?;
                // A shadow rule's denials let requests through: it never blocks.
                if self.mode == Mode::Shadow {
                    policy
                } else {
                    policy.with_block_for(block_for)
                }
            }
        };
        let count_status = self.checked_count_status(self.mode).map_err(|why| {
            (
                Setting::CountStatus,
                ConfigError::with_kind(ConfigErrorKind::Rule, why),
            )
        })?;
        let policy = match self.lease {
            Some(lease) => policy.with_lease(lease).map_err(at(Setting::Lease))?,
            None => policy,
        };
        if count_status.is_some() && self.lease.is_some() {
            return Err((
                Setting::Lease,
                ConfigError::with_kind(
                    ConfigErrorKind::Rule,
                    "lease does not work with count_status: a leased unit is spent before the \
                     handler runs, and count_status counts a request only after its response; \
                     remove one of them",
                ),
            ));
        }
        let max_cost = self.max_cost.unwrap_or(quota.capacity());
        if max_cost == 0 {
            return Err((
                Setting::MaxCost,
                ConfigError::with_kind(ConfigErrorKind::Rule, "max_cost must be at least 1"),
            ));
        }
        Ok(CompiledRule {
            header_item: response::kept(header_item(&policy)),
            header_kept: response::kept_static(&header_item(&policy)),
            policy,
            quota,
            mode: self.mode,
            delay,
            in_flight: None,
            key: self.key.clone().unwrap_or_else(|| Arc::clone(default_key)),
            route,
            cost,
            max_cost,
            quota_for: self.quota_for.clone(),
            quota_from: self.quota_from.clone(),
            overridable: self.overridable,
            count_status,
            priced,
        })
    }

    /// The cost at admission (the estimate) and the part settled after the response, for a
    /// rule priced by its response; checked against what does not go with it.
    fn priced(&self) -> Result<(Cost, Option<Arc<Priced>>), ConfigError> {
        let Some(response_cost) = &self.response_cost else {
            return Ok((Cost::One, None));
        };
        let refused = [
            (
                !matches!(self.cost, CostSpec::One),
                "cost or cost_header (the estimate is the request's cost)",
            ),
            (self.mode == Mode::Delay, "delay mode"),
            (self.block_for.is_some(), "block_for"),
            (self.count_status.is_some(), "count_status"),
            (self.lease.is_some(), "lease"),
        ];
        if let Some((_, what)) = refused.iter().find(|(set, _)| *set) {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                format!("cost_from_response does not work with {what}: remove one of them"),
            ));
        }
        let (cost, priced) = response_cost.compile()?;
        Ok((cost, Some(Arc::new(priced))))
    }

    /// The checked `count_status`, if the rule has one.
    fn checked_count_status(&self, mode: Mode) -> Result<Option<Arc<[StatusMatch]>>, String> {
        let Some(statuses) = &self.count_status else {
            return Ok(None);
        };
        if statuses.is_empty() {
            return Err(format!(
                "count_status is an empty list: {}, or leave it out to count every request",
                count_status::ALLOWED
            ));
        }
        for status in statuses {
            status
                .validate()
                .map_err(|why| format!("count_status: {why}"))?;
        }
        if mode == Mode::Delay {
            return Err(
                "count_status cannot be used in delay mode: delay mode takes a \
                        request's place in the queue before the handler runs, while \
                        count_status counts a request only after its response"
                    .to_owned(),
            );
        }
        Ok(Some(statuses.as_slice().into()))
    }
}

/// The longest block a rule may set (a year, as the longest period).
const MAX_BLOCK: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Checks a rule's `block_for` in `mode`.
fn check_block_for(block_for: Duration, mode: Mode) -> Result<(), ConfigError> {
    let rule = |message: String| Err(ConfigError::with_kind(ConfigErrorKind::Rule, message));
    if block_for.is_zero() || block_for > MAX_BLOCK {
        return rule(format!(
            "block_for {block_for:?} is out of range: use from 1µs to 365 days, e.g. \"10m\""
        ));
    }
    if mode == Mode::Delay {
        return rule(
            "block_for cannot be used in delay mode (a queued request waits for its slot); use \
             mode enforce, or remove block_for"
                .into(),
        );
    }
    Ok(())
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
    BlockFor,
    CountStatus,
    Lease,
    /// What an in-flight rule cannot have, or its limit.
    InFlight,
    /// An in-flight rule's time to live.
    InFlightTtl,
    /// A cost from the response, or what does not go with it.
    ResponseCost,
}

/// `policy`'s item of the `RateLimit-Policy` header (for a rule's policy, written once with
/// the rule; for a tier's, when its headers are).
pub(crate) fn header_item(policy: &Policy) -> HeaderValue {
    let quota = policy.quota();
    response::policy_item(policy.name(), quota.limit(), quota.period())
}

/// A rule ready to use: defaults applied, quota validated.
#[derive(Clone)]
pub(crate) struct CompiledRule {
    pub(crate) policy: Policy,
    /// The policy's item of the `RateLimit-Policy` header, written once.
    pub(crate) header_item: HeaderValue,
    /// The same item, held for the life of the process (see `response::kept_static`): what
    /// the headers of a request under this rule alone point to. `None` if it is not held.
    pub(crate) header_kept: Option<&'static HeaderValue>,
    pub(crate) quota: Quota,
    pub(crate) mode: Mode,
    /// In delay mode: the queue, which also shapes `policy`.
    pub(crate) delay: Option<DelayQueue>,
    /// For a limit on requests in flight: the limit, and how long a request may wait for a
    /// slot. Its `policy` then only names it (in headers, metrics and `Control`), and is
    /// never decided by.
    pub(crate) in_flight: Option<InFlightRule>,
    pub(crate) key: Arc<dyn KeyExtractor>,
    pub(crate) route: Route,
    pub(crate) cost: Cost,
    pub(crate) max_cost: u32,
    pub(crate) quota_for: Option<TierFn>,
    /// Each client's quota, looked up at run time.
    pub(crate) quota_from: Option<QuotaLookup>,
    /// Whether a quota set for a client at run time decides its requests.
    pub(crate) overridable: bool,
    /// Only responses with these statuses are counted (see [`Rule::count_status`]).
    pub(crate) count_status: Option<Arc<[StatusMatch]>>,
    /// A cost known after the response (see [`Rule::cost_from_response`]): `cost` is then
    /// the estimate a request reserves.
    pub(crate) priced: Option<Arc<Priced>>,
}

impl CompiledRule {
    /// A rule for every request under `policy` (of `quota`), keyed by `key`: what
    /// `RateLimitLayer::new` limits with. Nothing in it can be wrong, so it cannot fail.
    pub(crate) fn everything(policy: Policy, quota: Quota, key: Arc<dyn KeyExtractor>) -> Self {
        Self {
            header_item: response::kept(header_item(&policy)),
            header_kept: response::kept_static(&header_item(&policy)),
            policy,
            quota,
            mode: Mode::Enforce,
            delay: None,
            in_flight: None,
            key,
            route: Route::default(),
            cost: Cost::One,
            max_cost: quota.capacity(),
            quota_for: None,
            quota_from: None,
            overridable: false,
            count_status: None,
            priced: None,
        }
    }

    /// Whether a request under this rule is decided by one check and its answer alone:
    /// enforced (not shadow), not delayed, not a limit on requests in flight, nothing counted
    /// or priced once the response is known.
    pub(crate) fn is_plain(&self) -> bool {
        self.mode == Mode::Enforce
            && self.delay.is_none()
            && self.in_flight.is_none()
            && self.count_status.is_none()
            && self.priced.is_none()
    }

    /// Whether some client's quota under this rule may differ from the rule's own: tiers, a
    /// lookup, or overrides.
    pub(crate) fn has_client_quotas(&self) -> bool {
        self.quota_for.is_some() || self.quota_from.is_some() || self.overridable
    }

    /// The policy of this rule for another quota (a tier's), in the rule's mode.
    pub(crate) fn policy_for(&self, quota: Quota) -> Result<Policy, ConfigError> {
        let policy = match &self.delay {
            Some(queue) => queue.policy(self.policy.name(), quota),
            None => Policy::new(self.policy.name(), quota, self.policy.algorithm()),
        }?
        .counted_as(&self.policy)
        .kept_as(&self.policy);
        // A tier blocks and leases as the rule does.
        let policy = match self.policy.block_for() {
            Some(block_for) => policy.with_block_for(block_for),
            None => policy,
        };
        match self.policy.lease() {
            Some(lease) => policy.with_lease(lease),
            None => Ok(policy),
        }
    }
}

impl fmt::Debug for CompiledRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledRule")
            .field("policy", &self.policy)
            .field("mode", &self.mode)
            .field("delay", &self.delay)
            .field("in_flight", &self.in_flight)
            .field("key", &self.key.describe())
            .field("route", &self.route)
            .field("cost", &self.cost)
            .field("max_cost", &self.max_cost)
            .field("count_status", &self.count_status)
            .field("priced", &self.priced)
            .finish_non_exhaustive()
    }
}
