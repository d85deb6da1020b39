//! [`Scale`]: the units a bucket's state is counted in, and how a state counted in one scale
//! reads in another, so that a client whose quota changes keeps what it has used.
//!
//! The bucket algorithms (GCRA, the leaky bucket, the token bucket) count in microseconds of
//! their emission interval `T`: a GCRA backlog of `3·T` is three units used. Read under another
//! quota as it is, that backlog would be `3·T / T'` units: lowering a quota would let a client
//! that had used much of the old one through again. So a state is kept with the scale it was
//! written in, `T` and the burst `B`, whenever that is not its rule's own (the *home* scale of
//! [`Params::home`]), and a reader under another scale converts it first, keeping the units
//! used: `used' = ceil(used · T' / T)`, at most two of the new buckets (as a debt charged while
//! over is bounded). The window algorithms count requests, whatever the quota: their states
//! read alike under any, and are never marked.
//!
//! A state kept in its rule's scale carries no mark, so a rule whose quota never changes per
//! client stores exactly what it stored before (one number for GCRA) and converts nothing. The
//! conversion is computed in `f64`, exactly as the Lua scripts compute it
//! (`lua/prelude.lua`'s `rescaled`), so that every store converts to the same microsecond.

use super::{Algorithm, Params, State};

/// The scale a bucket's state is counted in: its emission interval and burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Scale {
    /// `T`, µs per unit.
    pub(crate) interval: u64,
    /// `B`, units in a full bucket.
    pub(crate) burst: u64,
}

impl Params {
    /// The scale states decided by these params are counted in.
    pub(crate) fn scale(&self) -> Scale {
        Scale {
            interval: self.interval,
            burst: self.burst,
        }
    }

    /// The mark a state written by these params under `algorithm` is kept with: `None` for
    /// its rule's own scale and for the windows, which need none.
    pub(crate) fn mark(&self, algorithm: Algorithm) -> Option<Scale> {
        let scale = self.scale();
        (algorithm.uses_burst() && scale != self.home).then_some(scale)
    }
}

/// `us` microseconds of scale `from`'s interval as as many units of `to` µs each, rounded
/// up, at most `cap`: `min(ceil(us · to / from), cap)`, in `f64` as `lua/prelude.lua` has it
/// (every input is below 2^53, and both sides round the product and the quotient alike).
pub(crate) fn rescaled(us: u64, from: u64, to: u64, cap: u64) -> u64 {
    if from == to {
        return us.min(cap);
    }
    let converted = (us as f64 * to as f64 / from.max(1) as f64).ceil();
    if converted >= cap as f64 {
        cap
    } else {
        // Below `cap`, so below 2^64: the cast is exact for the integer `ceil` gave.
        converted as u64
    }
}

impl State {
    /// Reads this state, kept in scale `from`, in `p`'s scale at `now`, keeping the units it
    /// has used (see the module docs). Nothing changes for a window algorithm or when the
    /// scales are the same.
    pub(crate) fn rescale(&mut self, from: Scale, p: &Params, now: u64) {
        if from == p.scale() {
            return;
        }
        match self {
            State::Gcra(s) | State::LeakyBucket(s) => s.rescale(from, p, now),
            State::TokenBucket(s) => s.rescale(from, p, now),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::quota::Quota;

    const S: u64 = 1_000_000;
    const NOW: u64 = 1_700_000_000_000_000;

    /// `limit` per 10 s under `algorithm`, kept as a rule of `home_limit` per 10 s would be.
    fn per_10s(algorithm: Algorithm, limit: u32, home_limit: u32) -> Params {
        let ten = Duration::from_secs(10);
        let home = Quota::new(home_limit, ten).unwrap().params(algorithm);
        let mut p = Quota::new(limit, ten).unwrap().params(algorithm);
        p.home = home.scale();
        p
    }

    #[test]
    fn what_was_used_counts_against_a_lowered_quota_in_every_algorithm() {
        for algorithm in Algorithm::ALL {
            let pro = per_10s(algorithm, 20, 5);
            let plain = per_10s(algorithm, 5, 5);
            let mut state = State::new(algorithm);
            for _ in 0..3 {
                assert!(state.check(&pro, NOW, 1).allowed, "{algorithm}");
            }
            state.rescale(pro.scale(), &plain, NOW);
            // 3 of 5 used: 2 left.
            for left in [1, 0] {
                let d = state.check(&plain, NOW, 1);
                assert_eq!((d.allowed, d.remaining), (true, left), "{algorithm}");
            }
            assert!(!state.check(&plain, NOW, 1).allowed, "{algorithm}");
        }
    }

    #[test]
    fn what_was_used_counts_against_a_raised_quota_in_every_algorithm() {
        for algorithm in Algorithm::ALL {
            let plain = per_10s(algorithm, 5, 5);
            let pro = per_10s(algorithm, 20, 5);
            let mut state = State::new(algorithm);
            for _ in 0..5 {
                assert!(state.check(&plain, NOW, 1).allowed, "{algorithm}");
            }
            assert!(!state.check(&plain, NOW, 1).allowed, "{algorithm}");
            state.rescale(plain.scale(), &pro, NOW);
            // 5 of 20 used: 15 left.
            let d = state.check(&pro, NOW, 1);
            assert_eq!((d.allowed, d.remaining), (true, 14), "{algorithm}");
        }
    }

    #[test]
    fn a_state_far_over_a_new_quota_waits_at_most_two_of_its_buckets() {
        // 20 used at 0.5 s each, then 5 per 10 s (2 s each): 20 units, capped at 10.
        let pro = per_10s(Algorithm::Gcra, 20, 5);
        let plain = per_10s(Algorithm::Gcra, 5, 5);
        let mut state = State::new(Algorithm::Gcra);
        assert!(state.check(&pro, NOW, 20).allowed);
        state.rescale(pro.scale(), &plain, NOW);
        assert_eq!(state.expires_at(&plain), NOW + 20 * S);
        let d = state.check(&plain, NOW, 1);
        assert_eq!(d.retry_after, Some(Duration::from_secs(12)));
    }

    #[test]
    fn the_conversion_rounds_what_was_used_up() {
        assert_eq!(rescaled(1, 3, 2, u64::MAX), 1);
        assert_eq!(rescaled(3, 2, 3, u64::MAX), 5);
        assert_eq!(rescaled(4, 2, 3, 5), 5);
        assert_eq!(rescaled(7, 5, 5, 6), 6);
        assert_eq!(rescaled(0, 5, 7, 6), 0);
    }
}
