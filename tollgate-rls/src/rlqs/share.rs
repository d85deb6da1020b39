//! Shares that follow demand when demand exceeds what a window has left. Every stream adds
//! what it asks for to a demand counter of the current report period in the store; at its next
//! report it reads the total of the period before (every Envoy reports once a period) and,
//! if that total exceeds what the limit's window has left, asks for its part of what is left
//! in proportion to its own ask. Without it, the Envoys that report first in a window would
//! take everything.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tollgate::engine::{Ask, Engine};
use tollgate::key::sanitize;
use tollgate::store::Policy;
use tollgate::{Algorithm, Quota};

use super::grant::REPORT_PERIOD;

/// The demand counters: counts that live a minute from their first ask, far longer than the
/// period after theirs, when they are read.
fn demand_policy() -> Option<&'static Policy> {
    static POLICY: OnceLock<Option<Policy>> = OnceLock::new();
    POLICY
        .get_or_init(|| {
            let quota = Quota::any_rate(u32::MAX, Duration::from_secs(60), None).ok()?;
            Policy::new("rlqs-demand", quota, Algorithm::FixedWindowFromFirst).ok()
        })
        .as_ref()
}

/// The report period `now` is in.
fn period_of(now: SystemTime) -> u64 {
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    now / REPORT_PERIOD.as_secs().max(1)
}

fn demand_key(key: &str, period: u64) -> String {
    sanitize(format!("rlqs-demand:{period}:{key}"))
}

/// What a stream asking for `want` units of `key` (under `policy`) should ask for: `want`,
/// unless the asks of the last period exceed what the window has left, then its part of it.
/// Records `want` for the next period's reading. A store failure leaves `want` as it is (the
/// reservation will fail the same way).
pub(crate) async fn fair_share(engine: &Engine, key: &str, policy: &Policy, want: u32) -> u32 {
    let Some(demand) = demand_policy() else {
        return want;
    };
    let period = period_of(SystemTime::now());
    let _ = (engine.decide_one(&Ask::new(&demand_key(key, period), demand, want))).await;
    let Ok(last) = engine
        .peek(&demand_key(key, period.saturating_sub(1)), demand, 1)
        .await
    else {
        return want;
    };
    let asked = u64::from(u32::MAX).saturating_sub(last.remaining);
    let Ok(left) = engine.peek(key, policy, 1).await else {
        return want;
    };
    if asked <= left.remaining {
        return want;
    }
    let part = u64::from(want) * left.remaining / asked.max(1);
    u32::try_from(part).unwrap_or(want).clamp(1, want)
}
