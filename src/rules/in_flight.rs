//! A rule that limits requests in flight ([`Rule::in_flight`]): its checks and what the
//! limiter keeps of it.

use std::sync::Arc;
use std::time::Duration;

use super::{CompiledRule, Cost, CostSpec, Mode, Route, Rule, Setting};
use crate::algorithm::Algorithm;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::KeyExtractor;
use crate::quota::{InFlight, Policy, Quota};
use crate::response;

/// A compiled in-flight rule: the limit the store keeps, and how long a request may wait for
/// a slot (zero: not at all; `max_delay` in delay mode).
#[derive(Debug, Clone)]
pub(crate) struct InFlightRule {
    pub(crate) limit: InFlight,
    pub(crate) max_wait: Duration,
}

impl Rule {
    /// Checks an in-flight rule of at most `max` requests at once and fixes its defaults.
    pub(super) fn check_in_flight(
        &self,
        max: u32,
        default_key: &Arc<dyn KeyExtractor>,
    ) -> Result<CompiledRule, (Setting, ConfigError)> {
        let fail = |setting: Setting, message: String| {
            Err((
                setting,
                ConfigError::with_kind(ConfigErrorKind::Rule, message),
            ))
        };
        let rate_only = [
            (self.algorithm.is_some(), "algorithm"),
            (!matches!(self.cost, CostSpec::One), "a cost"),
            (self.max_cost.is_some(), "max_cost"),
            (self.quota_for.is_some(), "tiers (quota_for)"),
            (self.quota_from.is_some(), "a quota lookup (quota_from)"),
            (self.overridable, "overridable"),
            (self.block_for.is_some(), "block_for"),
            (self.count_status.is_some(), "count_status"),
            (self.lease.is_some(), "lease"),
            (self.response_cost.is_some(), "a cost from the response"),
        ];
        if let Some((_, what)) = rate_only.iter().find(|(set, _)| *set) {
            return fail(
                Setting::InFlight,
                format!(
                    "{what} applies to a rate, not to a limit on requests in flight \
                     (in_flight): remove it, or write the rate as a rule of its own"
                ),
            );
        }
        let at = |setting: Setting| move |e: ConfigError| (setting, e);
        let limit = InFlight::new(self.name.as_str(), max).map_err(at(Setting::InFlight))?;
        let limit = match self.in_flight_ttl {
            Some(ttl) => limit.with_ttl(ttl).map_err(at(Setting::InFlightTtl))?,
            None => limit,
        };
        let max_wait = match (self.mode, self.max_delay) {
            (Mode::Delay, Some(wait)) if !wait.is_zero() => wait,
            (Mode::Delay, _) => {
                return fail(
                    Setting::Mode,
                    "mode delay on a limit on requests in flight waits for a slot, and needs \
                     max_delay, the longest a request may wait (e.g. max_delay = \"2s\")"
                        .to_owned(),
                )
            }
            _ => Duration::ZERO,
        };
        let route =
            Route::new(self.methods.clone(), self.path.as_deref()).map_err(at(Setting::Path))?;
        // The policy only names the rule (headers, metrics, Control): never decided by.
        let quota = Quota::any_rate(max, limit.ttl(), None).map_err(at(Setting::InFlight))?;
        let policy = Policy::new(self.name.as_str(), quota, Algorithm::Gcra)
            .map_err(at(Setting::InFlight))?;
        Ok(CompiledRule {
            header_item: response::kept(response::in_flight_item(limit.name(), max)),
            header_kept: response::kept_static(&response::in_flight_item(limit.name(), max)),
            policy,
            quota,
            mode: self.mode,
            delay: None,
            in_flight: Some(InFlightRule { limit, max_wait }),
            key: self.key.clone().unwrap_or_else(|| Arc::clone(default_key)),
            route,
            cost: Cost::One,
            max_cost: 1,
            quota_for: None,
            quota_from: None,
            overridable: false,
            count_status: None,
            priced: None,
        })
    }
}
