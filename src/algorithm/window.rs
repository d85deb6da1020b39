//! The counting both fixed-window algorithms share; they differ only in where a window starts.

use super::Params;
use crate::decision::Decision;

/// A window's start and the cost allowed in it. `Default` (count 0) is a key with no history.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Window {
    /// Start (µs) of the window `count` belongs to.
    pub(super) start: u64,
    /// Cost allowed in that window so far.
    pub(super) count: u64,
}

impl Window {
    /// The stored window's start, when it has counted anything.
    pub(crate) fn started(&self) -> Option<u64> {
        (self.count > 0).then_some(self.start)
    }

    /// Decides a request of `cost` at `now` in the stored window if `current`, else in a new
    /// empty window opening at `new_start`; stores the window and count only when allowed.
    pub(crate) fn check(
        &mut self,
        p: &Params,
        now: u64,
        cost: u64,
        current: bool,
        new_start: u64,
    ) -> Decision {
        let (start, count) = if current {
            (self.start, self.count)
        } else {
            (new_start, 0)
        };
        let end = start.saturating_add(p.period.max(1));
        if count.saturating_add(cost) <= p.limit {
            let count = count.saturating_add(cost);
            *self = Window { start, count };
            return Decision::from_micros(
                true,
                p.burst,
                p.limit - count,
                end.saturating_sub(now),
                None,
            );
        }
        // The next window starts empty, so any cost up to `L` fits at `end` and not before.
        let retry_after = (cost <= p.limit).then(|| end.saturating_sub(now));
        let reset_after = if count > 0 {
            end.saturating_sub(now)
        } else {
            0
        };
        Decision::from_micros(
            false,
            p.burst,
            p.limit.saturating_sub(count),
            reset_after,
            retry_after,
        )
    }

    /// Records a denied request of `cost` (charged while over) in the stored window if
    /// `current`, else in a new one opening at `new_start`: the count goes past the limit, to
    /// at most `2·L` (a count already above stays).
    pub(crate) fn record(&mut self, p: &Params, cost: u64, current: bool, new_start: u64) {
        let (start, count) = if current {
            (self.start, self.count)
        } else {
            (new_start, 0)
        };
        let most = p.limit.saturating_mul(2).max(count);
        let count = count.saturating_add(cost).min(most);
        *self = Window { start, count };
    }

    /// From the end of the stored window on, the key decides like a new one.
    /// Lowers the count by `n` (not below 0) when the stored window is the current one.
    pub(crate) fn refund(&mut self, current: bool, n: u64) {
        if current {
            self.count = self.count.saturating_sub(n);
        }
    }

    pub(crate) fn expires_at(&self, p: &Params) -> u64 {
        self.started()
            .map_or(0, |start| start.saturating_add(p.period.max(1)))
    }
}
