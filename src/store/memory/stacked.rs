//! Stacked limits in memory: every shard involved locked once, in order, and the states
//! stored only when no blocking check was denied. The work is linear in the checks: they are
//! grouped by shard once, and each key's pending state is found by a map.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use super::shard::{lock, ShardGuard};
use super::table::block_after;
use super::MemoryStore;
use crate::algorithm::{self, Params, State};
use crate::decision::Decision;
use crate::quota::Policy;
use crate::store::check::Check;

impl MemoryStore {
    /// Decides one request against several limits at once, atomically: see
    /// `StoreExt::check_many`. The clock is read once, so every check sees the same instant.
    ///
    /// Every shard involved, and only those, is locked for the whole decision (each once, in
    /// ascending order, so two stacked decisions can never deadlock), each check is decided
    /// on a copy of its state, and the copies are stored only when no blocking check was
    /// denied. Two checks on the same policy and key are decided one after the other, as two
    /// calls to [`check_now`](Self::check_now) would be: the second sees what the first
    /// consumed. The time is linear in the checks (callers bound how many there are: the
    /// `rls` service takes at most `rls::MAX_DESCRIPTORS`).
    pub(crate) fn check_many_now(&self, checks: &[Check<'_>]) -> Vec<Decision> {
        if let [one] = checks {
            if !one.charge {
                return vec![self.check_now(one.key, one.policy, one.cost)];
            }
            if !one.blocking {
                return vec![self.charge_now(one)];
            }
        }
        let now = self.inner.clock.now();
        let hasher = &self.inner.hasher;
        let located: Vec<(u64, usize)> = checks
            .iter()
            .map(|c| {
                let hash = hasher.hash(c.key.as_bytes());
                (hash, self.shard_index(hash))
            })
            .collect();
        // The checks grouped by shard, each group in the checks' order (a stable sort), so
        // that repeated checks of one key see each other; the shards locked once each, in
        // ascending order, so two stacked decisions can never deadlock.
        let mut by_shard: Vec<usize> = (0..checks.len()).collect();
        by_shard.sort_by_key(|&i| located.get(i).map(|&(_, shard)| shard));
        let mut guards: Vec<(usize, ShardGuard<'_>)> = Vec::new();
        for &(_, shard) in by_shard.iter().filter_map(|&i| located.get(i)) {
            if guards.last().is_none_or(|&(last, _)| last != shard) {
                if let Some(mutex) = self.inner.shards.get(shard) {
                    guards.push((shard, lock(mutex)));
                }
            }
        }

        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut pending: Vec<Pending<'_>> = Vec::with_capacity(checks.len());
        // Where each (shard, table, key) is in `pending`.
        let mut known: HashMap<(usize, usize, &str), usize, RandomState> =
            HashMap::with_capacity_and_hasher(checks.len(), RandomState::default());
        // Which checks were denied by a block already in place.
        let mut by_block = vec![false; checks.len()];
        for i in by_shard {
            let (Some(check), Some(&(hash, shard_index))) = (checks.get(i), located.get(i)) else {
                continue;
            };
            let Some(shard) = guard(&mut guards, shard_index) else {
                continue;
            };
            shard.count_decision(now, hasher);
            let (p, cost) = (check.policy.params(), u64::from(check.cost));
            let table = shard.table_index(check.policy);
            let Some(found) = shard.table_at(table) else {
                continue;
            };
            if let Some(until) = found.live_block(check.key, hash, now) {
                if let (Some(b), Some(d)) = (by_block.get_mut(i), decisions.get_mut(i)) {
                    (*b, *d) = (true, Some(algorithm::blocked(p, now, until, cost)));
                }
                continue;
            }
            let slot = *known
                .entry((shard_index, table, check.key))
                .or_insert_with(|| {
                    let state = found.live_state(check.key, hash, p, now);
                    pending.push(Pending {
                        key: check.key,
                        policy: check.policy,
                        hash,
                        shard: shard_index,
                        table,
                        state: state.unwrap_or_else(|| State::new(check.policy.algorithm())),
                        params: p,
                        tracked: found.contains(check.key, hash),
                        allowed: false,
                    });
                    pending.len() - 1
                });
            let Some(q) = pending.get_mut(slot) else {
                continue;
            };
            // A second check of the key under another quota reads it in its own scale.
            q.state.rescale(q.params.scale(), p, now);
            q.params = p;
            let decision = match check.charge {
                true => q.state.charge(p, now, cost),
                false => q.state.check(p, now, cost),
            };
            q.allowed |= decision.allowed || check.charge;
            if let Some(d) = decisions.get_mut(i) {
                *d = Some(decision);
            }
        }
        let mut decisions: Vec<Decision> = decisions.into_iter().flatten().collect();
        let max = self.inner.max_keys_per_shard;

        let blocked = checks
            .iter()
            .zip(&decisions)
            .any(|(c, d)| c.blocking && !d.allowed);
        if blocked {
            // Only what this decision denied starts a block: blocking checks of a policy
            // with `block_for`, on keys not blocked already.
            for (i, check) in checks.iter().enumerate() {
                let (Some(decision), Some(&(hash, shard_index))) =
                    (decisions.get_mut(i), located.get(i))
                else {
                    continue;
                };
                let until = block_after(decision, check.policy, now);
                let already = by_block.get(i).copied().unwrap_or(true);
                let (Some(until), true, false) = (until, check.blocking, already) else {
                    continue;
                };
                if let Some(shard) = guard(&mut guards, shard_index) {
                    if let Some(max) = max {
                        shard.make_room_for(max, check.policy, check.key, hash, now, hasher);
                    }
                    (shard.table(check.policy)).block(check.key, hash, until, hasher);
                }
                let cost = u64::from(check.cost);
                *decision = algorithm::blocked(check.policy.params(), now, until, cost);
            }
            charge_denied(
                &mut guards,
                checks,
                &located,
                &decisions,
                &by_block,
                now,
                self,
            );
            return decisions;
        }
        // Stored as check_now stores: a tracked key always (its state may have been renewed
        // after expiry), a new key only once allowed.
        pending.retain(|q| q.tracked || q.allowed);
        for q in pending {
            if let Some(shard) = guard(&mut guards, q.shard) {
                if let Some(max) = max {
                    shard.make_room_for(max, q.policy, q.key, q.hash, now, hasher);
                }
                if let Some(table) = shard.table_at(q.table) {
                    table.store(q.key, q.hash, q.state, q.params, hasher);
                }
            }
        }
        decisions
    }
}

impl MemoryStore {
    /// One check that charges and blocks nothing (every hit charged, the reference's
    /// default): decided as the stacked path below decides it (a live block denies it and
    /// nothing is charged; otherwise the hit is charged and the state kept, allowed or
    /// not), with one shard lock and no bookkeeping for other checks.
    fn charge_now(&self, check: &Check<'_>) -> Decision {
        let now = self.inner.clock.now();
        let (hash, shard) = self.locate(check.key);
        let mut shard = lock(shard);
        let hasher = &self.inner.hasher;
        shard.count_decision(now, hasher);
        let (p, cost) = (check.policy.params(), u64::from(check.cost));
        let blocked = (shard.find(check.policy)).and_then(|t| t.live_block(check.key, hash, now));
        if let Some(until) = blocked {
            return algorithm::blocked(p, now, until, cost);
        }
        self.make_room_for(&mut shard, check.policy, check.key, hash, now);
        (shard.table(check.policy)).decide_with(check.key, hash, p, now, hasher, |state| {
            (state.charge(p, now, cost), true)
        })
    }
}

/// The locked shard `index` among `guards` (sorted by index).
fn guard<'g, 's>(
    guards: &'g mut [(usize, ShardGuard<'s>)],
    index: usize,
) -> Option<&'g mut ShardGuard<'s>> {
    let at = guards.binary_search_by_key(&index, |&(i, _)| i).ok()?;
    guards.get_mut(at).map(|(_, shard)| shard)
}

/// A state to store if the stacked decision is not blocked.
struct Pending<'a> {
    key: &'a str,
    /// The policy of the first check of this key and table.
    policy: &'a Policy,
    hash: u64,
    shard: usize,
    /// The position of the policy's table in the shard.
    table: usize,
    state: State,
    params: &'a Params,
    /// Whether the key was tracked when the decision began.
    tracked: bool,
    /// Whether any check of this key was allowed.
    allowed: bool,
}

/// In a blocked stacked decision, records the cost of each denied check that charges
/// ([`Check::charge`]) on its key's state as it was before the decision (nothing allowed in
/// it is consumed), in the checks' order, as `store/redis/lua/stacked.lua` does.
fn charge_denied(
    guards: &mut [(usize, ShardGuard<'_>)],
    checks: &[Check<'_>],
    located: &[(u64, usize)],
    decisions: &[Decision],
    by_block: &[bool],
    now: u64,
    store: &MemoryStore,
) {
    let (hasher, max) = (&store.inner.hasher, store.inner.max_keys_per_shard);
    for (i, check) in checks.iter().enumerate() {
        let denied = decisions.get(i).is_some_and(|d| !d.allowed);
        let blocked = by_block.get(i).copied().unwrap_or(true);
        // A key that a block replaced keeps its block.
        let blocks = check.policy.block_for_us() > 0;
        let (true, true, false, false, Some(&(hash, shard_index))) =
            (check.charge, denied, blocked, blocks, located.get(i))
        else {
            continue;
        };
        let Some(shard) = guard(guards, shard_index) else {
            continue;
        };
        let p = check.policy.params();
        let table = shard.table_index(check.policy);
        let live = shard
            .table_at(table)
            .and_then(|t| t.live_state(check.key, hash, p, now));
        let mut state = live.unwrap_or_else(|| State::new(check.policy.algorithm()));
        state.charge(p, now, u64::from(check.cost));
        if let Some(max) = max {
            shard.make_room_for(max, check.policy, check.key, hash, now, hasher);
        }
        if let Some(table) = shard.table_at(table) {
            table.store(check.key, hash, state, p, hasher);
        }
    }
}
