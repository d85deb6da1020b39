//! [`Shard`]: one independently locked part of the memory store, its tables, and the sweeps
//! that keep them to the live keys.

use parking_lot::{Mutex, MutexGuard};

use super::key_hasher::KeyHasher;
use super::table::PolicyTable;
use crate::quota::Policy;

/// A shard is swept after at least this many decisions, however few keys it holds.
const MIN_SWEEP_INTERVAL: usize = 64;
/// A shard is swept for the time at most this often (µs): a key the last sweep kept may have
/// been renewed since, and then the sweep frees nothing.
const MIN_SWEEP_GAP_US: u64 = 1_000_000;

/// The clients whose keys hash to this shard, one table per policy (name and algorithm) seen
/// here. Tables are few (a rule's tiers share its name) and stay once made, so a table's
/// position in the shard never changes: the first is 0, the others 1 and on.
pub(super) struct Shard {
    /// The first policy's table, in the shard itself: most shards hold one policy's clients,
    /// and a decision then reaches its slots with one read fewer than through a `Vec`.
    first: Option<PolicyTable>,
    /// The tables of the other policies seen here.
    others: Vec<PolicyTable>,
    /// Decisions left until the next sweep: as many as the last sweep kept keys (at least
    /// `MIN_SWEEP_INTERVAL`), counted down so that a decision compares with zero.
    until_sweep: usize,
    /// Or at this time (µs), when every key the last sweep kept has expired, so that a shard
    /// that held a flood is emptied soon after the flood's keys expire, not only after as many
    /// decisions again. `u64::MAX` when the last sweep kept nothing.
    sweep_by: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Self {
            first: None,
            others: Vec::new(),
            until_sweep: MIN_SWEEP_INTERVAL,
            sweep_by: u64::MAX,
        }
    }
}

impl Shard {
    /// Every table, the first first.
    fn tables(&self) -> impl Iterator<Item = &PolicyTable> {
        self.first.iter().chain(&self.others)
    }

    /// Every table, the first first.
    fn tables_mut(&mut self) -> impl Iterator<Item = &mut PolicyTable> {
        self.first.iter_mut().chain(&mut self.others)
    }

    /// Keys tracked, expired ones not yet swept included.
    pub(super) fn len(&self) -> usize {
        self.tables().map(PolicyTable::len).sum()
    }

    /// Room for keys with a state, in every table.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.tables().map(PolicyTable::capacity).sum()
    }

    /// Whether the first table is `policy`'s, or there is none yet (and it will be).
    #[inline(always)]
    fn first_is_for(&self, policy: &Policy) -> bool {
        self.first.as_ref().is_none_or(|first| first.is_for(policy))
    }

    /// The position of `policy`'s table, made if there is none yet.
    #[inline(always)]
    pub(super) fn table_index(&mut self, policy: &Policy) -> usize {
        if self.first_is_for(policy) {
            self.first.get_or_insert_with(|| PolicyTable::new(policy));
            return 0;
        }
        1 + self.other_index(policy)
    }

    /// The position of `policy`'s table among the others, made if there is none yet: out of
    /// line, so that the common case inlines without this one's frame.
    #[inline(never)]
    fn other_index(&mut self, policy: &Policy) -> usize {
        match self.others.iter().position(|t| t.is_for(policy)) {
            Some(index) => index,
            None => {
                self.others.push(PolicyTable::new(policy));
                self.others.len() - 1
            }
        }
    }

    /// `policy`'s table, made if there is none yet.
    #[inline]
    pub(super) fn table(&mut self, policy: &Policy) -> &mut PolicyTable {
        // Most shards hold one policy's table: found without a call.
        if self.first_is_for(policy) {
            return self.first.get_or_insert_with(|| PolicyTable::new(policy));
        }
        let index = self.other_index(policy);
        &mut self.others[index]
    }

    /// The table at `index` (from [`table_index`](Self::table_index)).
    pub(super) fn table_at(&mut self, index: usize) -> Option<&mut PolicyTable> {
        match index.checked_sub(1) {
            None => self.first.as_mut(),
            Some(other) => self.others.get_mut(other),
        }
    }

    /// `policy`'s table, if there is one.
    pub(super) fn find(&self, policy: &Policy) -> Option<&PolicyTable> {
        self.tables().find(|t| t.is_for(policy))
    }

    /// `policy`'s table, if there is one.
    pub(super) fn find_mut(&mut self, policy: &Policy) -> Option<&mut PolicyTable> {
        self.tables_mut().find(|t| t.is_for(policy))
    }

    /// Counts one decision and sweeps expired state once the shard has seen as many decisions
    /// as its last sweep kept keys, or once all those keys have expired. A sweep costs O(keys),
    /// so this is O(1) per decision (a sweep for the time frees every key it visits, bar
    /// renewed ones, at most once a second), and the shard holds at most its live keys plus
    /// one sweep interval of new ones.
    pub(super) fn count_decision(&mut self, now: u64, hasher: &KeyHasher) {
        self.until_sweep = self.until_sweep.saturating_sub(1);
        if self.until_sweep == 0 || now >= self.sweep_by {
            self.sweep(now, hasher);
        }
    }

    /// Makes room for `key` under `policy` when the shard holds `max` keys already and not
    /// this one: expired state is swept, and if nothing had expired, one key is forgotten.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn make_room_for(
        &mut self,
        max: usize,
        policy: &Policy,
        key: &str,
        hash: u64,
        now: u64,
        hasher: &KeyHasher,
    ) {
        let full = self.len() >= max;
        if !full || self.find(policy).is_some_and(|t| t.contains(key, hash)) {
            return;
        }
        let before = self.len();
        self.sweep(now, hasher);
        if self.len() == before {
            for table in self.tables_mut() {
                if table.evict_one(hasher) {
                    break;
                }
            }
        }
    }

    /// Out of line: one decision in many sweeps, and the others are faster without its code.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self, now: u64, hasher: &KeyHasher) {
        let mut last_expiry = None;
        for table in self.tables_mut() {
            last_expiry = last_expiry.max(table.sweep(now, hasher));
            // `retain` alone keeps a table at its peak size after a flood.
            table.shrink_if_roomy(hasher);
        }
        self.until_sweep = self.len().max(MIN_SWEEP_INTERVAL);
        self.sweep_by = last_expiry.map_or(u64::MAX, |last| {
            last.max(now.saturating_add(MIN_SWEEP_GAP_US))
        });
    }
}

/// A shard's lock: parking_lot's, whose lock and unlock are one atomic operation each with no
/// poison flag to read (a panic while a shard is locked cannot leave it inconsistent: every
/// update is one assignment).
pub(super) type ShardLock = Mutex<Shard>;

/// A locked shard.
pub(super) type ShardGuard<'a> = MutexGuard<'a, Shard>;

/// Locks `shard`.
#[inline]
pub(super) fn lock(shard: &ShardLock) -> ShardGuard<'_> {
    shard.lock()
}
