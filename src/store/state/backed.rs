//! [`StateBacked`]: the algorithms run on a state store of either form, deciding on the state
//! read and writing what they decided as one change of the key.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use super::access::StateAccess;
use super::Update;
use crate::algorithm::slots::Slots;
use crate::algorithm::{self, Params, Saved, State};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy};
use crate::store::block_after;
use crate::store::check::Check;
use crate::store::grant::Grant;

/// What one try at a key decided: an answer, with or without a state to write first.
enum Step<T> {
    /// Nothing to write: the answer stands.
    Done(T),
    /// The answer stands once this state is written, to live until the given time (µs).
    Write(Saved, u64, T),
}

/// A key's state as it decides now.
enum Live {
    /// Blocked until then (µs).
    Blocked(u64),
    /// The algorithm's state, read in the policy's scale; `stored` is whether the key has one
    /// that still counts, `rescaled` whether it was kept in another scale (a check writes it
    /// back in the policy's, allowed or not, as every store does).
    State {
        state: State,
        stored: bool,
        rescaled: bool,
    },
}

/// How many keys' decisions may be under way at once in one instance (keys are spread over
/// this many turns by a hash).
const TURNS: usize = 256;

/// The algorithms over a state store of either form (a [`StateAccess`]), deciding by `clock`.
///
/// In one instance, the decisions of one key on a [`StateStore`](super::StateStore) take
/// turns: each reads and writes the state in its turn, so they never overwrite each other's
/// reads, and a refused write only ever means another instance wrote first. A burst on one key
/// then costs a read and a write per request, not a read and a refused write for every request
/// still waiting. An [`AtomicStateStore`](super::AtomicStateStore) needs no turns: it decides
/// inside its own update.
#[derive(Clone)]
pub(crate) struct StateBacked<S> {
    pub(crate) backend: S,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) prefix: Arc<str>,
    turns: Arc<[tokio::sync::Mutex<()>]>,
    hasher: foldhash::fast::RandomState,
}

impl<S: StateAccess> StateBacked<S> {
    /// `backend` deciding by `clock`, its keys under `prefix`.
    pub(crate) fn new(backend: S, clock: Arc<dyn Clock>, prefix: Arc<str>) -> Self {
        Self {
            backend,
            clock,
            prefix,
            turns: (0..TURNS).map(|_| tokio::sync::Mutex::new(())).collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// The same, with another key prefix.
    pub(crate) fn with_prefix(self, prefix: Arc<str>) -> Self {
        Self { prefix, ..self }
    }

    /// The same, deciding by another clock.
    pub(crate) fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self { clock, ..self }
    }

    pub(crate) fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// The turn in this instance of the decisions of the backend's key `key`.
    pub(super) fn turn(&self, key: &str) -> &tokio::sync::Mutex<()> {
        &self.turns[self.hasher.hash_one(key) as usize % TURNS]
    }

    /// `<prefix>:<policy>:<algorithm>:<client key>`.
    pub(crate) fn state_key(&self, key: &str, policy: &Policy) -> String {
        let algorithm = policy.algorithm().as_str();
        let mut out = String::with_capacity(
            self.prefix.len() + policy.name().len() + algorithm.len() + key.len() + 3,
        );
        for part in [&*self.prefix, policy.name(), algorithm] {
            out.push_str(part);
            out.push(':');
        }
        out.push_str(key);
        out
    }

    /// `<prefix>:<limit name>:slots:<client key>`: where `key`'s slots under `limit` are.
    pub(crate) fn slots_key(&self, key: &str, limit: &InFlight) -> String {
        format!("{}:{}:slots:{key}", self.prefix, limit.name())
    }

    /// Lets `step` change the slots of `key` under `limit` (none when the key has no state),
    /// at the time they are read; when it says they changed, they are written as one change
    /// of the key, to live until their last lease ends. Returns `step`'s answer.
    pub(super) async fn update_slots<T: Send>(
        &self,
        key: &str,
        limit: &InFlight,
        mut step: impl FnMut(&mut Slots, u64) -> (bool, T) + Send,
    ) -> Result<T, StoreError> {
        let key = self.slots_key(key, limit);
        let turn = &self.turns[self.hasher.hash_one(&key) as usize % TURNS];
        let decide = |bytes: Option<&[u8]>| {
            let now = self.clock.now();
            let mut slots = match bytes.map(Saved::decode).transpose() {
                Ok(None) => Slots::default(),
                Ok(Some(Saved::Slots(slots))) => slots,
                Ok(Some(_)) => return Err(StoreError::key_state("not the slots of requests")),
                Err(e) => return Err(StoreError::key_state(e)),
            };
            let (changed, answer) = step(&mut slots, now);
            if !changed {
                return Ok((Update::Keep, answer));
            }
            let ttl = Duration::from_micros(slots.expires_at().saturating_sub(now).max(1));
            let bytes = Saved::Slots(slots).encode();
            Ok((Update::Set { bytes, ttl }, answer))
        };
        self.backend.apply(&key, turn, decide).await
    }

    /// Lets `step` decide on `key`'s state at the time it is read, and has the backend store
    /// what it asks for as one change of the key (see [`StateAccess`]).
    async fn update<T: Send>(
        &self,
        key: &str,
        policy: &Policy,
        mut step: impl FnMut(Live, &Params, u64) -> Step<T> + Send,
    ) -> Result<T, StoreError> {
        let key = self.state_key(key, policy);
        let p = policy.params();
        let turn = self.turn(&key);
        let decide = |bytes: Option<&[u8]>| {
            let now = self.clock.now();
            let saved = match bytes {
                Some(bytes) => Some(Saved::decode(bytes).map_err(StoreError::key_state)?),
                None => None,
            };
            Ok(match step(live(saved, policy, now), p, now) {
                Step::Done(answer) => (Update::Keep, answer),
                Step::Write(saved, until, answer) => {
                    let ttl = Duration::from_micros(until.saturating_sub(now).max(1));
                    let bytes = saved.encode();
                    (Update::Set { bytes, ttl }, answer)
                }
            })
        };
        self.backend.apply(&key, turn, decide).await
    }

    /// Decides `c`'s request, consuming it if allowed. A denial starts the policy's block
    /// (`block_for`) if it has one and `c` blocks; else, if `c` charges, it records its cost
    /// (see `State::charge`). A state read in another scale is written back in the policy's,
    /// allowed or not, when the check is `alone` (not one of stacked limits, which write
    /// nothing when denied on the other stores).
    pub(crate) async fn check(&self, c: &Check<'_>, alone: bool) -> Result<Decision, StoreError> {
        let (key, policy, cost) = (c.key, c.policy, u64::from(c.cost));
        let (blocking, charge) = (c.blocking, c.charge);
        self.update(key, policy, |live, p, now| match live {
            Live::Blocked(until) => Step::Done(algorithm::blocked(p, now, until, cost)),
            Live::State {
                mut state,
                rescaled,
                ..
            } => {
                let decision = state.check(p, now, cost);
                if decision.allowed {
                    let until = state.expires_at(p);
                    return Step::Write(Saved::kept(state, p), until, decision);
                }
                if let Some(until) = block_after(&decision, policy, now).filter(|_| blocking) {
                    let decision = algorithm::blocked(p, now, until, cost);
                    return Step::Write(Saved::Blocked(until), until, decision);
                }
                if charge && policy.block_for().is_none() {
                    state.charge(p, now, cost);
                    let until = state.expires_at(p);
                    return Step::Write(Saved::kept(state, p), until, decision);
                }
                if rescaled && alone {
                    let until = state.expires_at(p);
                    return Step::Write(Saved::kept(state, p), until, decision);
                }
                Step::Done(decision)
            }
        })
        .await
    }

    /// The decision a request of `cost` would get now (cost 0: a look), consuming nothing.
    pub(crate) async fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let cost = u64::from(cost);
        self.update(key, policy, |live, p, now| {
            Step::Done(match live {
                Live::Blocked(until) => algorithm::blocked(p, now, until, cost),
                Live::State { state, .. } if cost == 0 => state.look(p, now),
                Live::State { mut state, .. } => state.check(p, now, cost),
            })
        })
        .await
    }

    /// Forgets the key's state and any block.
    pub(crate) async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.backend.forget(&self.state_key(key, policy)).await
    }

    /// Blocks the key for `duration` from now (zero: a reset).
    pub(crate) async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        if micros == 0 {
            return self.reset(key, policy).await;
        }
        self.update(key, policy, |_, _, now| {
            let until = now.saturating_add(micros);
            Step::Write(Saved::Blocked(until), until, ())
        })
        .await
    }

    /// Gives `n` units back (see `StoreExt::refund`).
    pub(crate) async fn refund(
        &self,
        key: &str,
        policy: &Policy,
        n: u32,
    ) -> Result<(), StoreError> {
        self.update(key, policy, |live, p, now| match live {
            Live::State {
                mut state,
                stored: true,
                ..
            } => {
                state.refund(p, now, u64::from(n));
                let until = state.expires_at(p);
                Step::Write(Saved::kept(state, p), until, ())
            }
            _ => Step::Done(()),
        })
        .await
    }

    /// Leases from `min` to `max` units (see `StoreExt::acquire`).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        let (min, max) = (u64::from(min), u64::from(max));
        self.update(key, policy, |live, p, now| match live {
            Live::Blocked(until) => {
                Step::Done(Grant::new(0, algorithm::blocked(p, now, until, min), 0))
            }
            Live::State {
                mut state,
                rescaled,
                ..
            } => {
                let g = state.acquire(p, now, min, max);
                let grant = Grant::new(
                    u32::try_from(g.granted).unwrap_or(u32::MAX),
                    g.decision,
                    g.mark,
                );
                // A state read in another scale is kept in the policy's, granted or not.
                if g.granted > 0 || rescaled {
                    let until = state.expires_at(p);
                    Step::Write(Saved::kept(state, p), until, grant)
                } else {
                    Step::Done(grant)
                }
            }
        })
        .await
    }

    /// Gives back unused units of a lease (see `StoreExt::release`).
    pub(crate) async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        // Nothing to give back: the state is not touched (not even read in another scale), as
        // on every store.
        if unused == 0 {
            return Ok(0);
        }
        self.update(key, policy, |live, p, now| match live {
            Live::State {
                mut state,
                stored: true,
                rescaled,
            } => {
                let before = state.clone();
                let taken = state.release(p, now, u64::from(unused), grant.mark);
                let taken = u32::try_from(taken).unwrap_or(u32::MAX);
                // A return may move the state by less than a unit: it is kept all the same.
                if state == before && !rescaled {
                    Step::Done(taken)
                } else {
                    let until = state.expires_at(p);
                    Step::Write(Saved::kept(state, p), until, taken)
                }
            }
            _ => Step::Done(0),
        })
        .await
    }

    /// Several limits, one after the other (not atomic across them: an earlier limit counts a
    /// request a later one denies), each charged as its check asks.
    pub(crate) async fn check_many(
        &self,
        checks: &[Check<'_>],
    ) -> Result<Vec<Decision>, StoreError> {
        let mut decisions = Vec::with_capacity(checks.len());
        let alone = checks.len() == 1;
        for c in checks {
            decisions.push(self.check(c, alone).await?);
        }
        Ok(decisions)
    }
}

/// What `saved` means for `policy` at `now`: a block still running, else the algorithm's
/// state read in the policy's scale, new when there is none, it has expired, or it is another
/// algorithm's.
fn live(saved: Option<Saved>, policy: &Policy, now: u64) -> Live {
    let p = policy.params();
    let (mut state, from) = match saved {
        Some(Saved::Blocked(until)) if until > now => return Live::Blocked(until),
        Some(Saved::State(state)) => (state, p.home),
        Some(Saved::Scaled(state, scale)) => (state, scale),
        _ => (State::new(policy.algorithm()), p.scale()),
    };
    let rescaled = from != p.scale() && policy.algorithm().uses_burst();
    state.rescale(from, p, now);
    if state.algorithm() == policy.algorithm() && now < state.expires_at(p) {
        return Live::State {
            state,
            stored: true,
            rescaled,
        };
    }
    Live::State {
        state: State::new(policy.algorithm()),
        stored: false,
        rescaled: false,
    }
}

impl<S> fmt::Debug for StateBacked<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateBacked")
            .field("clock", &self.clock)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}
