//! How a script's reply becomes a decision, a lease or a count: the integers each script in
//! `lua/` replies with, read back.

use crate::decision::Decision;
use crate::error::StoreError;
use crate::store::check::Check;
use crate::store::grant::Grant;

/// Reads the scripts' reply `{allowed, remaining, reset_after_us, retry_after_us (-1 = none)}`.
pub(crate) fn decision_from_reply(limit: u64, reply: &[i64]) -> Result<Decision, StoreError> {
    let &[allowed, remaining, reset_after, retry_after] = reply else {
        return Err(StoreError::backend(format!(
            "unexpected script reply {reply:?} (expected 4 integers)"
        )));
    };
    let micros = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(Decision::from_micros(
        allowed == 1,
        limit,
        micros(remaining),
        micros(reset_after),
        (retry_after >= 0).then(|| micros(retry_after)),
    ))
}

/// Reads `lua/lease.lua`'s reply to an acquire:
/// `{granted, remaining, reset_after_us, retry_after_us (-1 = none), mark}`.
pub(crate) fn grant_from_reply(limit: u64, reply: &[i64]) -> Result<Grant, StoreError> {
    let &[granted, remaining, reset_after, retry_after, mark] = reply else {
        return Err(StoreError::backend(format!(
            "unexpected lease script reply {reply:?} (expected 5 integers)"
        )));
    };
    let decision = decision_from_reply(
        limit,
        &[i64::from(granted > 0), remaining, reset_after, retry_after],
    )?;
    Ok(Grant::new(
        u32::try_from(granted).unwrap_or(0),
        decision,
        u64::try_from(mark).unwrap_or(0),
    ))
}

/// Reads `lua/lease.lua`'s reply to a release: `{units taken back}`.
pub(crate) fn released_from_reply(reply: &[i64]) -> Result<u32, StoreError> {
    match reply {
        &[taken] => Ok(u32::try_from(taken).unwrap_or(0)),
        _ => Err(StoreError::backend(format!(
            "unexpected lease script reply {reply:?} (expected 1 integer)"
        ))),
    }
}

/// Reads the stacked script's reply: 4 integers per check, in order.
pub(crate) fn decisions_from_reply(
    checks: &[Check<'_>],
    reply: &[i64],
) -> Result<Vec<Decision>, StoreError> {
    if reply.len() != 4 * checks.len() {
        return Err(StoreError::backend(format!(
            "unexpected stacked script reply {reply:?} (expected 4 integers per check, {} checks)",
            checks.len()
        )));
    }
    checks
        .iter()
        .zip(reply.chunks_exact(4))
        .map(|(c, r)| decision_from_reply(c.policy.params().burst, r))
        .collect()
}
