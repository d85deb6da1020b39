//! A shard of the memory store: its keys, their state, and the sweeps that keep it to the live
//! ones.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::quality::RandomState;

use crate::algorithm::{Algorithm, State};
use crate::decision::Decision;
use crate::quota::Policy;

/// A shard's keys. foldhash, seeded at random per store: faster than SipHash, and client
/// keys (chosen by clients) cannot aim at its buckets.
pub(super) type Table = HashMap<String, Tracked, RandomState>;

pub(super) struct Shard {
    pub(super) entries: Table,
    /// Decisions since this shard was last swept.
    pub(super) since_sweep: usize,
    /// Keys left by the last sweep: the next sweep comes after as many decisions.
    pub(super) kept_by_sweep: usize,
    /// Or at this time (µs), when every key the last sweep kept has expired, so that a shard
    /// that held a flood is emptied soon after the flood's keys expire, not only after as many
    /// decisions again. `u64::MAX` when the last sweep kept nothing.
    pub(super) sweep_by: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Self {
            entries: Table::default(),
            since_sweep: 0,
            kept_by_sweep: 0,
            sweep_by: u64::MAX,
        }
    }
}

pub(super) struct Tracked {
    pub(super) state: State,
    pub(super) expires_at: u64,
    /// Until when (µs) the client is blocked, if it is: the state is then a new one, for the
    /// client to start afresh when the block ends (`expires_at` is the same time).
    pub(super) blocked_until: Option<u64>,
}

/// A shard is swept after at least this many decisions, however few keys it holds.
const MIN_SWEEP_INTERVAL: usize = 64;
/// A shard is swept for the time at most this often (µs): a key the last sweep kept may have
/// been renewed since, and then the sweep frees nothing.
const MIN_SWEEP_GAP_US: u64 = 1_000_000;
/// A table with more than this many times as much room as keys is shrunk, to twice its keys.
/// In between (a table shrinks below a quarter full and grows when full) it never thrashes.
const SHRINK_WHEN_ROOM_PER_KEY: usize = 4;
/// Tables with room for fewer keys are left as they are: too small to matter.
pub(super) const MIN_SHRINK_CAPACITY: usize = 1_024;

/// When a decision starts a block under `policy` (one with `block_for`, denying what a wait
/// could allow): until when.
pub(super) fn block_after(decision: &Decision, policy: &Policy, now: u64) -> Option<u64> {
    let block_for = policy.block_for_us();
    let starts = !decision.allowed && block_for > 0 && decision.retry_after.is_some();
    starts.then(|| now.saturating_add(block_for))
}

impl Tracked {
    /// A client blocked until `until`, with a new state for after the block.
    pub(super) fn blocked(algorithm: Algorithm, until: u64) -> Self {
        Self {
            state: State::new(algorithm),
            expires_at: until,
            blocked_until: Some(until),
        }
    }

    /// Until when the client is blocked under `algorithm` at `now`, if it is. A block of
    /// another algorithm's state does not count (on Redis it is another key).
    pub(super) fn live_block(&self, algorithm: Algorithm, now: u64) -> Option<u64> {
        self.blocked_until
            .filter(|&until| until > now && self.state.is(algorithm))
    }

    /// Whether this state still decides for `algorithm` at `now`. Expired state decides like
    /// no history, and state of another algorithm (a policy changed on reload) means nothing.
    pub(super) fn is_live(&self, algorithm: Algorithm, now: u64) -> bool {
        self.expires_at > now && self.state.is(algorithm)
    }
}

/// Counts one decision in `shard` and sweeps expired state once the shard has seen as many
/// decisions as its last sweep kept keys, or once all those keys have expired. A sweep costs
/// O(keys), so this is O(1) per decision (a sweep for the time frees every key it visits, bar
/// renewed ones, at most once a second), and the shard holds at most its live keys plus one
/// sweep interval of new ones.
pub(super) fn count_decision(shard: &mut Shard, now: u64) {
    shard.since_sweep += 1;
    if shard.since_sweep >= shard.kept_by_sweep.max(MIN_SWEEP_INTERVAL) || now >= shard.sweep_by {
        sweep(shard, now);
    }
}

fn sweep(shard: &mut Shard, now: u64) {
    let mut last_expiry = None;
    shard.entries.retain(|_, t| {
        let live = t.expires_at > now;
        if live {
            last_expiry = last_expiry.max(Some(t.expires_at));
        }
        live
    });
    shard.since_sweep = 0;
    shard.kept_by_sweep = shard.entries.len();
    shard.sweep_by = last_expiry.map_or(u64::MAX, |last| {
        last.max(now.saturating_add(MIN_SWEEP_GAP_US))
    });
    shrink_if_roomy(&mut shard.entries);
}

/// Gives back a table's room once it holds far fewer keys than it has room for (a flood of
/// random keys has come and gone): `retain` alone keeps the table at its peak size.
pub(super) fn shrink_if_roomy(entries: &mut Table) {
    let room = entries.capacity();
    if room > MIN_SHRINK_CAPACITY && room > SHRINK_WHEN_ROOM_PER_KEY * entries.len() {
        entries.shrink_to(2 * entries.len());
    }
}

/// Sweeps a full shard; if nothing had expired, forgets one key.
pub(super) fn make_room(shard: &mut Shard, now: u64) {
    let before = shard.entries.len();
    sweep(shard, now);
    if shard.entries.len() == before {
        if let Some(victim) = shard.entries.keys().next().cloned() {
            shard.entries.remove(&victim);
        }
    }
}

/// A panic while a shard was locked cannot leave it inconsistent (every update is one
/// assignment), so a poisoned lock is used as is.
pub(super) fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}
