//! Quota taken from the store for one stream's bucket, and the token bucket that spends it
//! in Envoy. Every unit Envoy can admit under an assignment was charged in the store first,
//! so instances sharing a store never assign more than a limit's window holds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::r#type::v3::TokenBucket;
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt32Value};
use tollgate::engine::{Ask, Engine};
use tollgate::store::Policy;
use tollgate::store::StoreError;

/// Envoy's report period: its filter reports every cached bucket every 5 s, whatever
/// `reporting_interval` says (filter_persistence.cc).
pub const REPORT_PERIOD: Duration = Duration::from_secs(5);
/// An assignment's time to live: two report periods, so one late report does not let it
/// lapse; each report renews it.
pub(crate) const ASSIGNMENT_TTL_SECS: u32 = 10;
/// The token bucket's fill interval: long, so that its refill during an assignment's life is
/// small (and charged); short enough that Envoy's initial fill (`max_tokens / fill_rate`
/// seconds back on its monotonic clock) stays valid.
pub(crate) const FILL_INTERVAL_SECS: u32 = 60;

/// Units a stream holds from the store for one bucket, in one window of its limit.
#[derive(Debug, Clone)]
pub(crate) struct Reservation {
    pub(crate) key: String,
    pub(crate) policy: Policy,
    pub(crate) units: u32,
    pub(crate) window: u64,
}

/// The window of `policy` at `now` (epoch-aligned, as the fixed window counts).
pub(crate) fn window_of(policy: &Policy, now: SystemTime) -> u64 {
    let period = policy.quota().period().as_micros().max(1);
    let now = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros();
    u64::try_from(now / period).unwrap_or(u64::MAX)
}

/// Units to ask for: the stream's demand over the next report period (`demand` requests a
/// second), with a tenth more for growth, at least 1. (What is left unused is given back at
/// the next report, unless the window has turned: more headroom wastes more quota.)
pub(crate) fn wanted(demand: f64) -> u32 {
    let units = (demand * REPORT_PERIOD.as_secs_f64() * 11.0 / 10.0).ceil();
    (units as u32).max(1)
}

/// Takes up to `want` units of `key` under `policy` from the store: all of them if the window
/// holds them, else what it has left (one more check); 0 when it is spent.
pub(crate) async fn reserve(
    engine: &Engine,
    key: &str,
    policy: &Policy,
    want: u32,
) -> Result<u32, StoreError> {
    let decision = engine.decide_one(&Ask::new(key, policy, want)).await?;
    if decision.allowed {
        return Ok(want);
    }
    let rest = u32::try_from(decision.remaining.min(u64::from(want))).unwrap_or(want);
    if rest == 0 {
        return Ok(0);
    }
    let decision = engine.decide_one(&Ask::new(key, policy, rest)).await?;
    Ok(if decision.allowed { rest } else { 0 })
}

/// What Envoy's token bucket of `max_tokens` admits at most over an assignment's life: full
/// at creation, then `max_tokens` per [`FILL_INTERVAL_SECS`].
pub(crate) fn admits(max_tokens: u32) -> u64 {
    let max = u64::from(max_tokens);
    max + max * u64::from(ASSIGNMENT_TTL_SECS) / u64::from(FILL_INTERVAL_SECS)
}

/// The largest bucket whose [`admits`] fits in `units` reserved.
pub(crate) fn max_tokens_for(units: u32) -> u32 {
    let mut max = (u64::from(units) * u64::from(FILL_INTERVAL_SECS)
        / u64::from(FILL_INTERVAL_SECS + ASSIGNMENT_TTL_SECS)) as u32;
    while admits(max + 1) <= u64::from(units) {
        max += 1;
    }
    max
}

/// The token bucket for `max_tokens`. Envoy keeps its old bucket when `max_tokens`,
/// `tokens_per_fill` and the nanoseconds of `fill_interval` are unchanged
/// (global_client_impl.cc, `protoTokenBucketsEq`); `generation`'s parity in the nanoseconds
/// (which Envoy truncates away) makes every assignment a new, full bucket, so what it admits
/// is what this assignment reserved.
pub(crate) fn token_bucket(max_tokens: u32, generation: u32) -> TokenBucket {
    TokenBucket {
        max_tokens,
        tokens_per_fill: Some(UInt32Value { value: max_tokens }),
        fill_interval: Some(ProtoDuration {
            seconds: i64::from(FILL_INTERVAL_SECS),
            nanos: (generation % 2) as i32,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_admits_no_more_than_reserved() {
        for units in 1..500 {
            let max = max_tokens_for(units);
            assert!(admits(max) <= u64::from(units), "{units}");
            assert!(admits(max + 1) > u64::from(units), "{units}");
        }
        assert_eq!(max_tokens_for(1), 1);
        assert_eq!(max_tokens_for(70), 60);
    }

    #[test]
    fn demand_is_asked_for_one_period_with_headroom() {
        assert_eq!(wanted(0.0), 1);
        assert_eq!(wanted(10.0), 55);
    }
}
