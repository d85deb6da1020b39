//! Token bucket: `B` tokens, refilled continuously at `L` per `P`.
//!
//! Tokens are kept as exact integer credit in µs: one token is `T` µs of credit, a full bucket
//! `B·T`, and every elapsed µs adds one µs of credit up to the capacity. A request of cost `c`
//! is allowed iff the credit is at least `c·T`. No fractions, so the Lua script agrees exactly.
//!
//! With this exact refill it admits exactly what [`Gcra`](super::gcra::Gcra) admits, decision
//! for decision (GCRA's `tat` is the time this bucket is full again); that is expected. It is
//! offered because "token bucket" is the model many people reason in, and its state reads as
//! tokens.
//!
//! A request whose cost is larger than the burst `B` can never be allowed: it is denied with
//! `retry_after = None`.

use super::{rescaled, Params, Scale};
use crate::decision::Decision;

/// One key's bucket. `None` is a key with no history: a full bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TokenBucket {
    pub(super) bucket: Option<Bucket>,
}

/// The credit at the last allowed request. Redis stores it as the string `"credit:updated_at"`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Bucket {
    /// µs of credit (`T` per token) at `updated_at`.
    pub(super) credit: u64,
    /// When `credit` was computed, µs. Refill counts from here.
    pub(super) updated_at: u64,
}

impl TokenBucket {
    /// Decides a request of `cost` at `now`; takes `cost·T` of credit only when allowed.
    pub(crate) fn check(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        // `pending` is how far `now` lies before `updated_at` (a clock that went back): refill
        // only starts once that time comes, so it delays both the retry and the reset.
        let (credit, pending, updated_at) = match self.bucket {
            None => (capacity, 0, now),
            Some(b) => (
                b.credit
                    .saturating_add(now.saturating_sub(b.updated_at))
                    .min(capacity),
                b.updated_at.saturating_sub(now),
                b.updated_at.max(now),
            ),
        };
        let need = cost.saturating_mul(t);
        // A look (cost 0) is refused only in debt: more refill pending than credit in hand.
        let in_debt = cost == 0 && pending > credit;
        if cost > p.burst || credit < need || in_debt {
            let retry_after = (cost <= p.burst).then(|| match in_debt {
                true => pending - credit,
                false => (need - credit).saturating_add(pending),
            });
            let reset_after = (capacity - credit).saturating_add(pending);
            return Decision::from_micros(false, p.burst, credit / t, reset_after, retry_after);
        }
        let credit = credit - need;
        self.bucket = Some(Bucket { credit, updated_at });
        let reset_after = (capacity - credit).saturating_add(pending);
        Decision::from_micros(true, p.burst, credit / t, reset_after, None)
    }

    /// Records a denied request of `cost` at `now` (charged while over): the bucket is left
    /// empty and its refill starts later by what the request owed beyond the credit in hand,
    /// a debt of at most `B·T` (one more bucket; a later start from a clock that went back
    /// stays). The same TAT as [`Gcra::record`](super::gcra::Gcra::record) leaves.
    pub(crate) fn record(&mut self, p: &Params, now: u64, cost: u64) {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        let (credit, pending) = match self.bucket {
            None => (capacity, 0),
            Some(b) => (
                b.credit
                    .saturating_add(now.saturating_sub(b.updated_at))
                    .min(capacity),
                b.updated_at.saturating_sub(now),
            ),
        };
        let owed = pending.saturating_add(cost.saturating_mul(t));
        let debt = owed.saturating_sub(credit);
        let most = capacity.max(pending.saturating_sub(credit));
        self.bucket = Some(Bucket {
            credit: 0,
            updated_at: now.saturating_add(debt.min(most)),
        });
    }

    /// The time the bucket is full again; from then on it decides like a new key.
    /// Gives back `n` tokens at `now`, up to the capacity.
    pub(crate) fn refund(&mut self, p: &Params, now: u64, n: u64) {
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        if let Some(b) = self.bucket {
            let credit = b
                .credit
                .saturating_add(now.saturating_sub(b.updated_at))
                .min(capacity);
            self.bucket = Some(Bucket {
                credit: credit.saturating_add(n.saturating_mul(t)).min(capacity),
                updated_at: b.updated_at.max(now),
            });
        }
    }

    /// Reads a bucket kept in scale `from` in `p`'s (see `Scale`): what was used, the credit
    /// missing from the old capacity and any refill still pending, is converted to as many of
    /// `p`'s units, at most two of its buckets, and taken from a full bucket of `p`'s (the part
    /// beyond it pending, as a debt charged while over is).
    pub(crate) fn rescale(&mut self, from: Scale, p: &Params, now: u64) {
        let Some(b) = self.bucket else {
            return;
        };
        let old_t = from.interval.max(1);
        let old_capacity = from.burst.saturating_mul(old_t);
        let credit = (b.credit)
            .saturating_add(now.saturating_sub(b.updated_at))
            .min(old_capacity);
        let used = (old_capacity - credit).saturating_add(b.updated_at.saturating_sub(now));
        let t = p.interval.max(1);
        let capacity = p.burst.saturating_mul(t);
        let used = rescaled(used, old_t, t, capacity.saturating_mul(2));
        let spent = used.min(capacity);
        self.bucket = Some(Bucket {
            credit: capacity - spent,
            updated_at: now.saturating_add(used - spent),
        });
    }

    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        let capacity = p.burst.saturating_mul(p.interval.max(1));
        self.bucket.map_or(0, |b| {
            b.updated_at
                .saturating_add(capacity.saturating_sub(b.credit))
        })
    }
}

#[cfg(test)]
mod tests {
    //! The sequences all three buckets share are in `tests/shared.rs`.

    use std::time::Duration;

    use super::*;
    use crate::{Algorithm, Quota};

    #[test]
    fn clock_going_back_delays_refill_and_never_panics() {
        let p = Quota::new(5, Duration::from_micros(500))
            .unwrap()
            .params(Algorithm::TokenBucket);
        let mut s = TokenBucket::default();
        assert!(s.check(&p, 1_000, 5).allowed);
        // 100 µs earlier: still empty, and refill only starts at 1_000.
        let d = s.check(&p, 900, 1);
        assert_eq!(d.retry_after, Some(Duration::from_micros(200)));
        assert_eq!(d.reset_after, Duration::from_micros(600));
        assert!(!s.clone().check(&p, 1_099, 1).allowed);
        assert!(s.check(&p, 1_100, 1).allowed);
        for now in [0, u64::MAX, 0, 1 << 53, 7] {
            for cost in [0, 1, 5, 6, u64::MAX] {
                assert!(s.check(&p, now, cost).remaining <= 5);
            }
            let _ = s.expires_at(&p);
        }
    }
}
