//! The answer, as the reference gives it: one status per descriptor, the overall code, and
//! optionally the headers of the descriptor closest to its limit.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;

use super::config::unit_seconds;
use super::plan::{Item, Limited, Modes, PerDescriptor, Plan};
use tollgate::engine::Charging;
use tollgate::store::Decision;

/// What the store said about a request's limits.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// One decision per limit with a policy, in the plan's order; `looked` when they were
    /// peeks (the request was refused without the store).
    Decided {
        decisions: Vec<Decision>,
        looked: bool,
    },
    /// The store failed and the request is let through (fail open): OK, without numbers.
    FailedOpen,
    /// The store failed and the request is refused (fail closed).
    FailedClosed,
}

/// The names of the headers sent back to the client when the reference's
/// `LIMIT_RESPONSE_HEADERS_ENABLED` is on (its defaults: `RateLimit-Limit`,
/// `RateLimit-Remaining`, `RateLimit-Reset`).
///
/// ```
/// use tollgate_rls::ResponseHeaders;
///
/// let legacy = ResponseHeaders::new("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset");
/// assert_eq!(ResponseHeaders::default().limit, "RateLimit-Limit");
/// # let _ = legacy;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResponseHeaders {
    /// Carries the limit (`requests_per_unit`).
    pub limit: String,
    /// Carries what is left.
    pub remaining: String,
    /// Carries the seconds until the limit resets.
    pub reset: String,
}

impl ResponseHeaders {
    /// Headers with these names.
    pub fn new(
        limit: impl Into<String>,
        remaining: impl Into<String>,
        reset: impl Into<String>,
    ) -> Self {
        Self {
            limit: limit.into(),
            remaining: remaining.into(),
            reset: reset.into(),
        }
    }
}

impl Default for ResponseHeaders {
    fn default() -> Self {
        Self::new("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")
    }
}

/// The response, with what the statistics need to know about it.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) response: RateLimitResponse,
    /// Per descriptor: whether it was over its limit (shadow-mode ones included).
    pub(crate) over: PerDescriptor<bool>,
    /// Per descriptor: the units of its limit in use before this request, when the store
    /// said (the statistics count near and over hits from it, as the reference does).
    pub(crate) used_before: PerDescriptor<Option<u64>>,
    /// Whether the request was over a limit and answered OK by the global shadow mode.
    pub(crate) shadowed: bool,
}

/// One status per descriptor and the overall code.
pub(crate) fn respond(
    plan: &Plan<'_>,
    outcome: &Outcome,
    modes: Modes,
    headers: Option<&ResponseHeaders>,
) -> Answer {
    // Each descriptor's decision, if its limit went to the store.
    let mut decisions = match outcome {
        Outcome::Decided { decisions, .. } => decisions.iter(),
        _ => [].iter(),
    };
    let decided: PerDescriptor<Option<&Decision>> = (plan.items.iter())
        .map(|item| match item {
            Item::Limited(l) if l.limit.policy.is_some() => decisions.next(),
            _ => None,
        })
        .collect();
    let looked = matches!(outcome, Outcome::Decided { looked: true, .. });
    // Whether the allowed limits consumed nothing because the request was refused: by a
    // blocking limit (a refused request consumes nothing), by any limit (stop when over
    // limit), never when every hit is charged.
    let denied_by = |blocking_only: bool| {
        (plan.items.iter().zip(&decided)).any(|(item, d)| match (item, d) {
            (Item::Limited(l), Some(d)) => {
                (l.blocking() || !blocking_only) && l.cost > 0 && !d.allowed
            }
            _ => false,
        })
    };
    let refused = looked
        || match modes.charging {
            Charging::EveryHit => false,
            Charging::StopWhenOverLimit => denied_by(false),
            // AllowedOnly (and a mode added later): only a blocking denial refuses.
            _ => denied_by(true),
        };
    let mut statuses = Vec::with_capacity(plan.items.len());
    let mut over = PerDescriptor::with_capacity(plan.items.len());
    let mut used_before = PerDescriptor::with_capacity(plan.items.len());
    for (item, d) in plan.items.iter().zip(&decided) {
        let (s, o) = match item {
            Item::NoLimit => (status(Code::Ok, None, 0, None), false),
            Item::Unlimited => (status(Code::Ok, None, u32::MAX, None), false),
            Item::Limited(l) => limited(l, *d, outcome, refused),
        };
        used_before.push(match (item, d) {
            (Item::Limited(l), Some(d)) => Some(used(l, d, refused)),
            _ => None,
        });
        statuses.push(s);
        over.push(o);
    }
    let overall = overall(plan, &statuses);
    let shadowed = overall == Code::OverLimit && modes.shadow;
    let mut response = RateLimitResponse {
        overall_code: match shadowed {
            true => Code::Ok as i32,
            false => overall as i32,
        },
        ..RateLimitResponse::default()
    };
    if let Some(names) = headers {
        response.response_headers_to_add = closest(plan, &statuses)
            .map(|s| header_values(names, s))
            .unwrap_or_default();
    }
    response.statuses = statuses;
    Answer {
        response,
        over,
        used_before,
        shadowed,
    }
}

/// The units of `l`'s limit in use before this request, from its decision: what the limit
/// allows less what was left before the request took its cost (if it did).
fn used(l: &Limited<'_>, d: &Decision, refused: bool) -> u64 {
    let limit = u64::from(l.limit.requests_per_unit);
    let took = d.allowed && !refused;
    let left_before = match took {
        true => d.remaining.saturating_add(u64::from(l.cost)),
        false => d.remaining,
    };
    limit.saturating_sub(left_before)
}

/// A limited descriptor's status, and whether it was over its limit (even in shadow mode).
fn limited(
    l: &Limited<'_>,
    decision: Option<&Decision>,
    outcome: &Outcome,
    refused: bool,
) -> (DescriptorStatus, bool) {
    let current = Some(RateLimit {
        name: l.limit.name.clone(),
        requests_per_unit: l.limit.requests_per_unit,
        unit: l.limit.unit as i32,
    });
    let code = |over: bool| match over && !l.limit.shadow_mode {
        true => Code::OverLimit,
        false => Code::Ok,
    };
    if l.limit.policy.is_none() {
        // Nothing is allowed: refused until the end of the unit, as the reference says.
        let unit = unit_seconds(l.limit.unit).max(1);
        let now_secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let reset = Duration::from_secs(unit - now_secs % unit);
        let over = l.cost > 0;
        return (status(code(over), current, 0, Some(reset)), over);
    }
    let Some(d) = decision else {
        return match outcome {
            Outcome::FailedClosed => (status(code(l.cost > 0), current, 0, None), l.cost > 0),
            _ => (status(Code::Ok, None, 0, None), false),
        };
    };
    let cost = u64::from(l.cost);
    let remaining = match (l.cost, d.allowed) {
        // Not consumed: what it had before.
        (1.., true) if refused => d.remaining.saturating_add(cost),
        // A look (a request of cost 0) leaves what there is.
        (_, true) => d.remaining,
        (_, false) => 0,
    };
    let remaining = u32::try_from(remaining.min(d.limit)).unwrap_or(u32::MAX);
    // A look is denied only past the limit (charged while over): over, as in the reference.
    let over = !d.allowed;
    let reset = match d.retry_after {
        Some(retry) if !d.allowed => retry,
        _ => d.reset_after,
    };
    (status(code(over), current, remaining, Some(reset)), over)
}

fn status(
    code: Code,
    current_limit: Option<RateLimit>,
    limit_remaining: u32,
    reset: Option<Duration>,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit,
        limit_remaining,
        duration_until_reset: reset.map(|r| ProtoDuration {
            seconds: i64::try_from(whole_seconds(r)).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        quota: None,
    }
}

/// Whole seconds, rounded up, as the reference's windows count them.
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// OVER_LIMIT when a limit that is not a quota is over, or when every quota is.
fn overall(plan: &Plan<'_>, statuses: &[DescriptorStatus]) -> Code {
    let (mut over, mut quotas, mut quotas_over) = (false, 0, 0);
    for (item, s) in plan.items.iter().zip(statuses) {
        let is_over = s.code == Code::OverLimit as i32;
        let quota = match item {
            Item::Unlimited => continue,
            Item::NoLimit => plan.quota_mode,
            Item::Limited(l) => l.quota_mode,
        };
        if quota {
            quotas += 1;
            quotas_over += usize::from(is_over);
        } else {
            over |= is_over;
        }
    }
    match over || (quotas > 0 && quotas == quotas_over) {
        true => Code::OverLimit,
        false => Code::Ok,
    }
}

/// The status the headers describe: the last one over its limit (quotas aside), else the
/// first with the least remaining.
fn closest<'s>(plan: &Plan<'_>, statuses: &'s [DescriptorStatus]) -> Option<&'s DescriptorStatus> {
    let mut chosen: Option<&DescriptorStatus> = None;
    let mut least = u32::MAX;
    for (item, s) in plan.items.iter().zip(statuses) {
        if matches!(item, Item::Unlimited) || s.current_limit.is_none() {
            continue;
        }
        let quota = matches!(item, Item::Limited(l) if l.quota_mode);
        if s.code == Code::OverLimit as i32 && !quota {
            chosen = Some(s);
            least = 0;
        } else if s.limit_remaining < least {
            chosen = Some(s);
            least = s.limit_remaining;
        }
    }
    chosen
}

fn header_values(names: &ResponseHeaders, s: &DescriptorStatus) -> Vec<HeaderValue> {
    let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
    let reset = s.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
    let header = |key: &str, value: String| HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    };
    vec![
        header(&names.limit, limit.to_string()),
        header(&names.remaining, s.limit_remaining.to_string()),
        header(&names.reset, reset.to_string()),
    ]
}
