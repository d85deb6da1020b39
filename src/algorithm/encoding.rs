//! One key's state as bytes: how a state-level store (`tollgate::store::StateStore`) keeps it.
//!
//! Format 1, every number an unsigned 64-bit big-endian integer (µs for times):
//!
//! | bytes | what |
//! | --- | --- |
//! | 0 | the format's version: 1 |
//! | 1 | what follows: 0 a block, 1 GCRA, 2 token bucket, 3 leaky bucket, 4 fixed window, 5 fixed window from first, 6 sliding window log, 7 sliding window, 8 slots of requests in flight |
//! | 2.. | block: `until`; GCRA and leaky bucket: `tat`; token bucket: nothing (a full bucket) or `credit`, `updated_at`; both fixed windows: `start`, `count`; sliding window log: `base`, then `at`, `end` per entry, oldest first; sliding window: `start`, `prev`, `curr`; slots: `id`, `until` per slot, in the order they were taken |
//!
//! A bucket's state counted in another scale than its rule's (a client's own quota: see
//! `Scale`) is followed by that scale, `T` then `B`: GCRA and leaky bucket `tat`, `T`, `B`;
//! token bucket `credit`, `updated_at`, `T`, `B`. A reader of a version without scales refuses
//! those lengths rather than misread them.
//!
//! A reader refuses a version it does not know, rather than misread a newer writer's state.

use std::collections::VecDeque;
use std::fmt;

use super::fixed_window::FixedWindow;
use super::fixed_window_from_first::FixedWindowFromFirst;
use super::gcra::Gcra;
use super::sliding_window::SlidingWindow;
use super::sliding_window_log::{Entry, SlidingWindowLog};
use super::slots::{Held, Slots};
use super::token_bucket::{Bucket, TokenBucket};
use super::window::Window;
use super::{Algorithm, Params, Scale, State};

/// The version of the format this file writes, and the only one it reads.
pub(crate) const FORMAT: u8 = 1;

/// What a store keeps for one key: an algorithm's state, or a block.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Saved {
    /// The algorithm's state.
    State(State),
    /// Every request is denied until this time (µs).
    Blocked(u64),
    /// A bucket's state counted in this scale, not its rule's.
    Scaled(State, Scale),
    /// The slots of a client's requests in flight.
    Slots(Slots),
}

impl Saved {
    /// `state` as `p` writes it: marked with `p`'s scale when that is not its rule's.
    pub(crate) fn kept(state: State, p: &Params) -> Self {
        match p.mark(state.algorithm()) {
            Some(scale) => Saved::Scaled(state, scale),
            None => Saved::State(state),
        }
    }
}

/// Bytes that are not a state of this format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(&'static str);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unreadable rate-limit state: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

impl State {
    /// The algorithm this state belongs to.
    pub(crate) fn algorithm(&self) -> Algorithm {
        match self {
            State::Gcra(_) => Algorithm::Gcra,
            State::TokenBucket(_) => Algorithm::TokenBucket,
            State::LeakyBucket(_) => Algorithm::LeakyBucket,
            State::FixedWindow(_) => Algorithm::FixedWindow,
            State::FixedWindowFromFirst(_) => Algorithm::FixedWindowFromFirst,
            State::SlidingWindowLog(_) => Algorithm::SlidingWindowLog,
            State::SlidingWindow(_) => Algorithm::SlidingWindow,
        }
    }
}

impl Saved {
    /// The bytes of this state, in [`FORMAT`].
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut numbers: Vec<u64> = Vec::new();
        let kind = match self {
            Saved::Blocked(until) => {
                numbers.push(*until);
                0
            }
            Saved::Slots(slots) => {
                numbers.extend(slots.held.iter().flat_map(|s| [s.id, s.until]));
                SLOTS
            }
            Saved::State(state) | Saved::Scaled(state, _) => {
                match state {
                    State::Gcra(g) | State::LeakyBucket(g) => numbers.push(g.tat),
                    State::TokenBucket(t) => {
                        if let Some(b) = t.bucket {
                            numbers.extend([b.credit, b.updated_at]);
                        }
                    }
                    State::FixedWindow(FixedWindow(w))
                    | State::FixedWindowFromFirst(FixedWindowFromFirst(w)) => {
                        numbers.extend([w.start, w.count]);
                    }
                    State::SlidingWindowLog(log) => {
                        numbers.push(log.base);
                        numbers.extend(log.entries.iter().flat_map(|e| [e.at, e.end]));
                    }
                    State::SlidingWindow(s) => numbers.extend([s.start, s.prev, s.curr]),
                }
                // A full bucket holds nothing to read in a scale, a window counts requests.
                let full = matches!(state, State::TokenBucket(t) if t.bucket.is_none());
                let scaled = state.algorithm().uses_burst() && !full;
                if let (Saved::Scaled(_, scale), true) = (self, scaled) {
                    numbers.extend([scale.interval, scale.burst]);
                }
                kind_of(state.algorithm())
            }
        };
        let mut bytes = Vec::with_capacity(2 + 8 * numbers.len());
        bytes.extend([FORMAT, kind]);
        for n in numbers {
            bytes.extend(n.to_be_bytes());
        }
        bytes
    }

    /// The state in `bytes`, refused when they are not [`FORMAT`] or not well formed.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Saved, DecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(DecodeError("empty"))?;
        if version != FORMAT {
            return Err(DecodeError("unknown format version"));
        }
        let (&kind, rest) = rest.split_first().ok_or(DecodeError("no kind"))?;
        if rest.len() % 8 != 0 {
            return Err(DecodeError("a partial number"));
        }
        let n: Vec<u64> = rest
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let window = |n: &[u64]| Window {
            start: n[0],
            count: n[1],
        };
        let scale = |n: &[u64]| Scale {
            interval: n[0],
            burst: n[1],
        };
        let bucket = |n: &[u64]| Bucket {
            credit: n[0],
            updated_at: n[1],
        };
        let saved = match (kind, n.len()) {
            (0, 1) => Saved::Blocked(n[0]),
            (1, 1) => Saved::State(State::Gcra(Gcra { tat: n[0] })),
            (1, 3) => Saved::Scaled(State::Gcra(Gcra { tat: n[0] }), scale(&n[1..])),
            (3, 3) => Saved::Scaled(State::LeakyBucket(Gcra { tat: n[0] }), scale(&n[1..])),
            (2, 4) => Saved::Scaled(
                State::TokenBucket(TokenBucket {
                    bucket: Some(bucket(&n)),
                }),
                scale(&n[2..]),
            ),
            (2, 0) => Saved::State(State::TokenBucket(TokenBucket { bucket: None })),
            (2, 2) => Saved::State(State::TokenBucket(TokenBucket {
                bucket: Some(bucket(&n)),
            })),
            (3, 1) => Saved::State(State::LeakyBucket(Gcra { tat: n[0] })),
            (4, 2) => Saved::State(State::FixedWindow(FixedWindow(window(&n)))),
            (5, 2) => Saved::State(State::FixedWindowFromFirst(FixedWindowFromFirst(window(
                &n,
            )))),
            (6, len) if len % 2 == 1 => Saved::State(State::SlidingWindowLog(log(&n)?)),
            (7, 3) => Saved::State(State::SlidingWindow(SlidingWindow {
                start: n[0],
                prev: n[1],
                curr: n[2],
            })),
            (SLOTS, len) if len % 2 == 0 => Saved::Slots(Slots {
                held: (n.chunks_exact(2))
                    .map(|s| Held {
                        id: s[0],
                        until: s[1],
                    })
                    .collect(),
            }),
            (0..=SLOTS, _) => return Err(DecodeError("wrong length for its kind")),
            _ => return Err(DecodeError("unknown kind")),
        };
        Ok(saved)
    }
}

/// The kind byte of the slots of requests in flight.
const SLOTS: u8 = 8;

/// The kind byte of `algorithm`'s state.
fn kind_of(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::Gcra => 1,
        Algorithm::TokenBucket => 2,
        Algorithm::LeakyBucket => 3,
        Algorithm::FixedWindow => 4,
        Algorithm::FixedWindowFromFirst => 5,
        Algorithm::SlidingWindowLog => 6,
        Algorithm::SlidingWindow => 7,
    }
}

/// A log from its base and entries, refused unless the entries are in time order and each
/// holds some cost.
fn log(n: &[u64]) -> Result<SlidingWindowLog, DecodeError> {
    let base = n[0];
    let entries: VecDeque<Entry> = n[1..]
        .chunks_exact(2)
        .map(|e| Entry {
            at: e[0],
            end: e[1],
        })
        .collect();
    let mut last = (None, 0u64);
    for e in &entries {
        let total = e.end.wrapping_sub(base);
        if last.0.is_some_and(|at| at >= e.at) || total <= last.1 {
            return Err(DecodeError("a log out of order"));
        }
        last = (Some(e.at), total);
    }
    Ok(SlidingWindowLog { entries, base })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::algorithm::tests::{history, params, start};

    /// Every algorithm's state along a seeded history survives a round trip, and decides the
    /// same afterwards.
    #[test]
    fn every_state_survives_a_round_trip() {
        for algorithm in Algorithm::ALL {
            proptest!(ProptestConfig::with_cases(200), |(
                p in params(algorithm),
                start in start(),
                steps in history(false),
            )| {
                let mut state = State::new(algorithm);
                let mut now = start;
                for step in &steps {
                    now = step.next(now, &p, algorithm);
                    let saved = Saved::State(state.clone());
                    let bytes = saved.encode();
                    prop_assert_eq!(bytes[0], FORMAT);
                    prop_assert_eq!(Saved::decode(&bytes), Ok(saved));
                    state.charge(&p, now, step.cost(&p));
                }
            });
        }
        let block = Saved::Blocked(1_700_000_000_000_000);
        assert_eq!(Saved::decode(&block.encode()), Ok(block));
        let mut slots = Slots::default();
        slots.take(1, 3, 10, 7);
        slots.take(2, 3, 10, u64::MAX);
        let slots = Saved::Slots(slots);
        assert_eq!(Saved::decode(&slots.encode()), Ok(slots));
        let none = Saved::Slots(Slots::default());
        assert_eq!(none.encode(), [1, 8]);
        assert_eq!(Saved::decode(&none.encode()), Ok(none));
    }

    #[test]
    fn a_state_in_another_scale_keeps_its_scale() {
        let scale = Scale {
            interval: 500_000,
            burst: 20,
        };
        let gcra = Saved::Scaled(State::Gcra(Gcra { tat: 258 }), scale);
        let bytes = gcra.encode();
        assert_eq!(bytes.len(), 2 + 3 * 8);
        assert_eq!(Saved::decode(&bytes), Ok(gcra));
        let bucket = Saved::Scaled(
            State::TokenBucket(TokenBucket {
                bucket: Some(Bucket {
                    credit: 1,
                    updated_at: 2,
                }),
            }),
            scale,
        );
        assert_eq!(Saved::decode(&bucket.encode()), Ok(bucket));
        let windows = Saved::Scaled(State::new(Algorithm::FixedWindow), scale);
        assert!(Saved::decode(&windows.encode()).is_ok());
    }

    #[test]
    fn the_format_is_as_documented() {
        let gcra = Saved::State(State::Gcra(Gcra { tat: 258 }));
        assert_eq!(gcra.encode(), [1, 1, 0, 0, 0, 0, 0, 0, 1, 2]);
        let full = Saved::State(State::new(Algorithm::TokenBucket));
        assert_eq!(full.encode(), [1, 2]);
        let block = Saved::Blocked(1);
        assert_eq!(block.encode(), [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn an_unknown_version_or_malformed_state_is_refused() {
        let mut bytes = Saved::State(State::Gcra(Gcra { tat: 5 })).encode();
        bytes[0] = 2;
        assert_eq!(
            Saved::decode(&bytes),
            Err(DecodeError("unknown format version"))
        );
        assert!(Saved::decode(&[]).is_err());
        assert!(Saved::decode(&[1]).is_err());
        assert!(Saved::decode(&[1, 9]).is_err());
        assert!(Saved::decode(&[1, 8, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
        assert!(Saved::decode(&[1, 1, 0, 0]).is_err());
        assert!(Saved::decode(&[1, 4, 0, 0, 0, 0, 0, 0, 0, 1]).is_err());
        // A log whose second entry is older than its first.
        let mut log = vec![1u8, 6];
        for n in [0u64, 10, 1, 5, 2] {
            log.extend(n.to_be_bytes());
        }
        assert!(Saved::decode(&log).is_err());
    }
}
