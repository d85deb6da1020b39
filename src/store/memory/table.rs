//! [`PolicyTable`]: one policy's clients in one shard of the memory store.
//!
//! A table belongs to a policy name and an algorithm, so its slots hold only the client key and
//! the algorithm's state: 32 bytes for GCRA and the leaky bucket (a key of up to 22 bytes in
//! place, and the TAT, which is also when the state expires). Lookups hash the client key once,
//! with the store's seeded hasher, and build nothing: no key is allocated but a new one kept.
//!
//! A bucket's state written under a client's own quota, in another scale than its rule's (see
//! `algorithm::Scale`), is kept with its scale, as the other stores keep it in the state's
//! value: the first such decision turns the table's slots into slots that keep one
//! ([`Slots::Scaled`]), once. A table of a rule without quotas per client never turns, and its
//! decisions read nothing more than before.

use std::sync::Arc;

use super::key_hasher::KeyHasher;
use super::slot_table::SlotTable;
use crate::algorithm::{self, Algorithm, Gcra, Params, Scale, State};
use crate::decision::Decision;
use crate::quota::Policy;

/// The clients of one policy (name and algorithm) in one shard.
pub(super) struct PolicyTable {
    name: Arc<str>,
    algorithm: Algorithm,
    slots: Slots,
    /// Blocked clients (`Policy::block_for`, `Store::block`) and until when (µs). A client's
    /// state is new when its block ends, so a blocked client has no slot meanwhile.
    blocks: SlotTable<u64>,
}

/// The slots of a table, as small as its algorithm's state.
enum Slots {
    /// GCRA and the leaky bucket (which runs GCRA's engine): the TAT alone.
    Gcra(SlotTable<Gcra>),
    /// Every other algorithm: its state and when it expires.
    Other(SlotTable<Tracked>),
    /// A bucket's states, each with the scale it is counted in: once a client of the table
    /// was decided under its own quota.
    Scaled(SlotTable<Scaled>),
}

/// Runs `$body` on the typed table inside `$slots`, whichever it is.
macro_rules! each {
    ($slots:expr, $table:ident => $body:expr) => {
        match $slots {
            Slots::Gcra($table) => $body,
            Slots::Other($table) => $body,
            Slots::Scaled($table) => $body,
        }
    };
}

/// An algorithm's state as a slot keeps it.
trait Kept: Sized {
    /// The state of a client with no history.
    fn fresh(algorithm: Algorithm) -> Self;
    /// From when (µs) the state decides like a fresh one and may be forgotten.
    fn expiry(&self) -> u64;
    /// Decides a request of `cost` at `now` in place.
    fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision;
    /// A copy, as the algorithms' [`State`].
    fn state(&self, algorithm: Algorithm) -> State;
    /// Keeps `state` (of the table's algorithm), which expires by `p`.
    fn keep(state: State, p: &Params) -> Self;
    /// The scale the state is counted in: the rule's (`home`) but in a scaled slot.
    fn scale(&self, home: Scale) -> Scale {
        home
    }
}

impl Kept for Gcra {
    fn fresh(_: Algorithm) -> Self {
        Self::default()
    }

    fn expiry(&self) -> u64 {
        self.tat()
    }

    #[inline(always)]
    fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        // As `State::check` decides: a cost of 0 counts as 1.
        self.check(p, now, cost.max(1))
    }

    fn state(&self, algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::LeakyBucket => State::LeakyBucket(self.clone()),
            _ => State::Gcra(self.clone()),
        }
    }

    fn keep(state: State, _: &Params) -> Self {
        match state {
            State::Gcra(gcra) | State::LeakyBucket(gcra) => gcra,
            // A table's states are all of its algorithm.
            _ => Self::default(),
        }
    }
}

/// Any other algorithm's state, and when it expires.
struct Tracked {
    state: State,
    expires_at: u64,
}

impl Kept for Tracked {
    fn fresh(algorithm: Algorithm) -> Self {
        Self {
            state: State::new(algorithm),
            expires_at: 0,
        }
    }

    fn expiry(&self) -> u64 {
        self.expires_at
    }

    fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        let decision = self.state.check(p, now, cost);
        self.expires_at = self.state.expires_at(p);
        decision
    }

    fn state(&self, _: Algorithm) -> State {
        self.state.clone()
    }

    fn keep(state: State, p: &Params) -> Self {
        Self {
            expires_at: state.expires_at(p),
            state,
        }
    }
}

/// A bucket's state with the scale it is counted in (`None`: a new state, counted in none).
struct Scaled {
    tracked: Tracked,
    scale: Option<Scale>,
}

impl Kept for Scaled {
    fn fresh(algorithm: Algorithm) -> Self {
        Self {
            tracked: Tracked::fresh(algorithm),
            scale: None,
        }
    }

    fn expiry(&self) -> u64 {
        self.tracked.expires_at
    }

    /// Read in `p`'s scale first (see `State::rescale`), and kept in it.
    fn decide(&mut self, p: &Params, now: u64, cost: u64) -> Decision {
        if let Some(from) = self.scale {
            self.tracked.state.rescale(from, p, now);
        }
        self.scale = Some(p.scale());
        self.tracked.decide(p, now, cost)
    }

    fn state(&self, _: Algorithm) -> State {
        self.tracked.state.clone()
    }

    fn keep(state: State, p: &Params) -> Self {
        Self {
            tracked: Tracked::keep(state, p),
            scale: Some(p.scale()),
        }
    }

    fn scale(&self, home: Scale) -> Scale {
        self.scale.unwrap_or(home)
    }
}

impl PolicyTable {
    pub(super) fn new(policy: &Policy) -> Self {
        let algorithm = policy.algorithm();
        Self {
            name: Arc::clone(policy.shared_name()),
            algorithm,
            slots: match algorithm {
                Algorithm::Gcra | Algorithm::LeakyBucket => Slots::Gcra(SlotTable::default()),
                _ => Slots::Other(SlotTable::default()),
            },
            blocks: SlotTable::default(),
        }
    }

    /// Turns the table's slots into scaled ones (see [`Slots::Scaled`]) when `p` counts in
    /// another scale than the rule's and they are not yet: once, keeping every state as it is,
    /// in the rule's scale.
    fn scaled_for(&mut self, p: &Params) {
        if p.mark(self.algorithm).is_none() || matches!(self.slots, Slots::Scaled(_)) {
            return;
        }
        let (algorithm, home) = (self.algorithm, p.home);
        let empty = Slots::Scaled(SlotTable::default());
        let scaled = move |state: State, expires_at: u64| Scaled {
            tracked: Tracked { state, expires_at },
            scale: Some(home),
        };
        self.slots = match std::mem::replace(&mut self.slots, empty) {
            Slots::Gcra(t) => {
                Slots::Scaled(t.map(|g| scaled(Kept::state(&g, algorithm), g.expiry())))
            }
            Slots::Other(t) => Slots::Scaled(t.map(|t| scaled(t.state, t.expires_at))),
            slots => slots,
        };
    }

    /// Whether this table holds `policy`'s clients: the same name and algorithm. (A policy
    /// whose algorithm changes on reload starts afresh, as on Redis, where it is another key.)
    #[inline]
    pub(super) fn is_for(&self, policy: &Policy) -> bool {
        self.algorithm == policy.algorithm()
            && (Arc::ptr_eq(&self.name, policy.shared_name()) || *self.name == *policy.name())
    }

    /// Clients tracked: with a state, or blocked.
    pub(super) fn len(&self) -> usize {
        each!(&self.slots, t => t.len()) + self.blocks.len()
    }

    /// Room for this many clients with a state.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        each!(&self.slots, t => t.capacity())
    }

    /// Whether `key` has a slot or a block here.
    pub(super) fn contains(&self, key: &str, hash: u64) -> bool {
        each!(&self.slots, t => t.find(hash, key).is_some())
            || self.blocks.find(hash, key).is_some()
    }

    /// Until when `key` is blocked at `now`, if it is.
    pub(super) fn live_block(&self, key: &str, hash: u64, now: u64) -> Option<u64> {
        if self.blocks.is_empty() {
            return None;
        }
        let until = self.blocks.find(hash, key)?.kept;
        (until > now).then_some(until)
    }

    /// Decides a request of `cost` by `key` under `policy` at `now`, and keeps what changed: a
    /// tracked key's state always, a new key's once allowed, and a block the denial starts.
    #[inline]
    pub(super) fn check(
        &mut self,
        key: &str,
        hash: u64,
        policy: &Policy,
        now: u64,
        cost: u64,
        hasher: &KeyHasher,
    ) -> Decision {
        let p = policy.params();
        // Most decisions: GCRA states in the rule's own scale, no client blocked, none to
        // block. Inlined alone, so that the decision keeps to registers; the rest is a call.
        if let Slots::Gcra(t) = &mut self.slots {
            if self.blocks.is_empty() && policy.block_for_us() == 0 && p.scale() == p.home {
                return check_in(t, key, hash, self.algorithm, p, now, cost, hasher);
            }
        }
        self.check_any(key, hash, policy, now, cost, hasher)
    }

    /// [`check`](Self::check) in every case: out of line, as the rarer one.
    #[inline(never)]
    fn check_any(
        &mut self,
        key: &str,
        hash: u64,
        policy: &Policy,
        now: u64,
        cost: u64,
        hasher: &KeyHasher,
    ) -> Decision {
        let p = policy.params();
        if let Some(until) = self.live_block(key, hash, now) {
            return algorithm::blocked(p, now, until, cost);
        }
        let algorithm = self.algorithm;
        if !matches!(self.slots, Slots::Scaled(_)) && p.scale() != p.home {
            self.scaled_for(p);
        }
        let decision =
            each!(&mut self.slots, t => check_in(t, key, hash, algorithm, p, now, cost, hasher));
        match block_after(&decision, policy, now) {
            Some(until) => {
                self.block(key, hash, until, hasher);
                algorithm::blocked(p, now, until, cost)
            }
            None => decision,
        }
    }

    /// A copy of `key`'s state while it decides (not expired, not blocked), read in `p`'s
    /// scale.
    pub(super) fn live_state(&self, key: &str, hash: u64, p: &Params, now: u64) -> Option<State> {
        let algorithm = self.algorithm;
        let (mut state, from) = each!(&self.slots, t => t
            .find(hash, key)
            .filter(|s| s.kept.expiry() > now)
            .map(|s| (s.kept.state(algorithm), s.kept.scale(p.home))))?;
        state.rescale(from, p, now);
        Some(state)
    }

    /// Keeps `state` (decided by `p`) as `key`'s.
    pub(super) fn store(&mut self, key: &str, hash: u64, state: State, p: &Params, h: &KeyHasher) {
        self.scaled_for(p);
        each!(&mut self.slots, t => store_in(t, key, hash, Kept::keep(state, p), h));
    }

    /// Runs `f` on `key`'s live state, unblocked, and keeps what it leaves; `None` when there
    /// is none.
    pub(super) fn update<R>(
        &mut self,
        key: &str,
        hash: u64,
        p: &Params,
        now: u64,
        f: impl FnOnce(&mut State) -> R,
    ) -> Option<R> {
        if self.live_block(key, hash, now).is_some() {
            return None;
        }
        self.scaled_for(p);
        let algorithm = self.algorithm;
        each!(&mut self.slots, t => {
            let slot = t.find_mut(hash, key)?;
            if slot.kept.expiry() <= now {
                return None;
            }
            let mut state = slot.kept.state(algorithm);
            state.rescale(slot.kept.scale(p.home), p, now);
            let result = f(&mut state);
            slot.kept = Kept::keep(state, p);
            Some(result)
        })
    }

    /// Runs `f` on `key`'s live state (a new one if it has none), and keeps what `f` leaves
    /// if the key was tracked, or if `f` says to keep it. Blocks are the caller's to check.
    pub(super) fn decide_with<R>(
        &mut self,
        key: &str,
        hash: u64,
        p: &Params,
        now: u64,
        hasher: &KeyHasher,
        f: impl FnOnce(&mut State) -> (R, bool),
    ) -> R {
        let tracked = each!(&self.slots, t => t.find(hash, key).is_some());
        let live = self.live_state(key, hash, p, now);
        let mut state = live.unwrap_or_else(|| State::new(self.algorithm));
        let (result, keep) = f(&mut state);
        if tracked || keep {
            self.store(key, hash, state, p, hasher);
        }
        result
    }

    /// Blocks `key` until `until`: its state is forgotten (it starts afresh after the block).
    pub(super) fn block(&mut self, key: &str, hash: u64, until: u64, hasher: &KeyHasher) {
        each!(&mut self.slots, t => t.remove(hash, key, hasher));
        store_in(&mut self.blocks, key, hash, until, hasher);
    }

    /// Forgets `key`'s state and block.
    pub(super) fn remove(&mut self, key: &str, hash: u64, hasher: &KeyHasher) {
        each!(&mut self.slots, t => t.remove(hash, key, hasher));
        self.blocks.remove(hash, key, hasher);
    }

    /// Forgets every state and block that has expired at `now`; returns when the last one
    /// kept expires.
    pub(super) fn sweep(&mut self, now: u64, hasher: &KeyHasher) -> Option<u64> {
        let mut last = None;
        let mut live = |expires_at: u64| {
            let live = expires_at > now;
            if live {
                last = last.max(Some(expires_at));
            }
            live
        };
        each!(&mut self.slots, t => t.retain(|s| live(s.kept.expiry()), hasher));
        self.blocks.retain(|s| live(s.kept), hasher);
        last
    }

    /// Gives back the room of a table that holds far fewer clients than it has room for.
    pub(super) fn shrink_if_roomy(&mut self, hasher: &KeyHasher) {
        each!(&mut self.slots, t => shrink_if_roomy(t, hasher));
        shrink_if_roomy(&mut self.blocks, hasher);
    }

    /// Forgets one client, any; whether there was one.
    pub(super) fn evict_one(&mut self, hasher: &KeyHasher) -> bool {
        each!(&mut self.slots, t => t.remove_any(hasher)) || self.blocks.remove_any(hasher)
    }
}

/// A table with more than this many times as much room as keys is shrunk, to twice its keys.
/// In between (a table shrinks below a quarter full and grows when full) it never thrashes.
pub(super) const SHRINK_WHEN_ROOM_PER_KEY: usize = 4;
/// Tables with room for fewer keys are left as they are: too small to matter.
pub(super) const MIN_SHRINK_CAPACITY: usize = 1_024;

/// [`PolicyTable::check`] in a typed table: inlined, as the whole of a decision's work.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn check_in<K: Kept>(
    t: &mut SlotTable<K>,
    key: &str,
    hash: u64,
    algorithm: Algorithm,
    p: &Params,
    now: u64,
    cost: u64,
    hasher: &KeyHasher,
) -> Decision {
    if let Some(slot) = t.find_mut(hash, key) {
        // Expired state decides like a new one, and becomes one.
        if slot.kept.expiry() <= now {
            slot.kept = K::fresh(algorithm);
        }
        return slot.kept.decide(p, now, cost);
    }
    let mut kept = K::fresh(algorithm);
    let decision = kept.decide(p, now, cost);
    if decision.allowed {
        t.insert(hash, key, kept, hasher);
    }
    decision
}

fn store_in<K>(t: &mut SlotTable<K>, key: &str, hash: u64, kept: K, hasher: &KeyHasher) {
    match t.find_mut(hash, key) {
        Some(slot) => slot.kept = kept,
        None => t.insert(hash, key, kept, hasher),
    }
}

fn shrink_if_roomy<K>(t: &mut SlotTable<K>, hasher: &KeyHasher) {
    let room = t.capacity();
    if room > MIN_SHRINK_CAPACITY && room > SHRINK_WHEN_ROOM_PER_KEY * t.len() {
        t.shrink_to(2 * t.len(), hasher);
    }
}

/// When a decision starts a block under `policy` (one with `block_for`, denying what a wait
/// could allow): until when.
pub(crate) fn block_after(decision: &Decision, policy: &Policy, now: u64) -> Option<u64> {
    let block_for = policy.block_for_us();
    let starts = !decision.allowed && block_for > 0 && decision.retry_after.is_some();
    starts.then(|| now.saturating_add(block_for))
}
