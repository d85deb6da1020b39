//! Stacked limits in memory: every shard involved locked once, in order, and the states
//! stored only when no blocking check was denied.

use std::sync::MutexGuard;

use super::shard::{block_after, count_decision, lock, Shard, Tracked};
use super::MemoryStore;
use crate::algorithm::{self, Params, State};
use crate::decision::Decision;
use crate::store::stack::Check;

impl MemoryStore {
    /// Decides one request against several limits at once, atomically: see
    /// `StoreExt::check_many`. The clock is read once, so every check sees the same instant.
    ///
    /// Every shard involved is locked for the whole decision (each once, in ascending order,
    /// so two stacked decisions can never deadlock), each check is decided on a copy of its
    /// state, and the copies are stored only when no blocking check was denied. Two checks on
    /// the same policy and key are decided one after the other, as two calls to
    /// [`check_now`](Self::check_now) would be: the second sees what the first consumed.
    pub(crate) fn check_many_now(&self, checks: &[Check<'_>]) -> Vec<Decision> {
        if let [one] = checks {
            return vec![self.check_now(one.key, one.policy, one.cost)];
        }
        let now = self.inner.clock.now();
        let located: Vec<(String, usize)> = checks
            .iter()
            .map(|c| self.locate(c.key, c.policy))
            .collect();
        let mut order: Vec<usize> = located.iter().map(|&(_, shard)| shard).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, Shard>)> = order
            .into_iter()
            .filter_map(|i| self.inner.shards.get(i).map(|shard| (i, lock(shard))))
            .collect();

        // Decide, shard by shard; within a shard in the checks' order, so that repeated
        // checks of one key see each other.
        let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
        let mut pending: Vec<Pending<'_>> = Vec::with_capacity(checks.len());
        // Which checks were denied by a block already in place.
        let mut by_block = vec![false; checks.len()];
        for (shard_index, shard) in &mut guards {
            for (i, (check, (map_key, _))) in checks
                .iter()
                .zip(&located)
                .enumerate()
                .filter(|(_, (_, (_, s)))| s == shard_index)
            {
                count_decision(shard, now);
                let algorithm = check.policy.algorithm();
                let until = shard
                    .entries
                    .get(map_key.as_str())
                    .and_then(|t| t.live_block(algorithm, now));
                if let Some(until) = until {
                    by_block[i] = true;
                    let decision = algorithm::blocked(
                        check.policy.params(),
                        now,
                        until,
                        u64::from(check.cost),
                    );
                    if let Some(d) = decisions.get_mut(i) {
                        *d = Some(decision);
                    }
                    continue;
                }
                let slot = match pending.iter().position(|p| p.map_key == map_key.as_str()) {
                    Some(slot) => slot,
                    None => {
                        let tracked = shard.entries.get(map_key.as_str());
                        pending.push(Pending {
                            map_key,
                            shard: *shard_index,
                            state: tracked
                                .filter(|t| t.is_live(algorithm, now))
                                .map_or_else(|| State::new(algorithm), |t| t.state.clone()),
                            params: check.policy.params(),
                            tracked: tracked.is_some(),
                            allowed: false,
                        });
                        pending.len() - 1
                    }
                };
                let Some(p) = pending.get_mut(slot) else {
                    continue;
                };
                if !p.state.is(algorithm) {
                    // The same name under another algorithm: a key with no history.
                    p.state = State::new(algorithm);
                }
                p.params = check.policy.params();
                let decision = p.state.check(p.params, now, u64::from(check.cost));
                p.allowed |= decision.allowed;
                if let Some(d) = decisions.get_mut(i) {
                    *d = Some(decision);
                }
            }
        }
        let mut decisions: Vec<Decision> = decisions.into_iter().flatten().collect();

        let blocked = checks
            .iter()
            .zip(&decisions)
            .any(|(c, d)| c.blocking && !d.allowed);
        if blocked {
            // Only what this decision denied starts a block: blocking checks of a policy
            // with `block_for`, on keys not blocked already.
            for (i, check) in checks.iter().enumerate() {
                let (Some(decision), Some((map_key, shard_index))) =
                    (decisions.get_mut(i), located.get(i))
                else {
                    continue;
                };
                let until = block_after(decision, check.policy, now);
                let (Some(until), true, false) = (until, check.blocking, by_block[i]) else {
                    continue;
                };
                if let Some((_, shard)) = guards.iter_mut().find(|(s, _)| s == shard_index) {
                    self.make_room_for(shard, map_key, now);
                    let tracked = Tracked::blocked(check.policy.algorithm(), until);
                    shard.entries.insert(map_key.clone(), tracked);
                }
                *decision =
                    algorithm::blocked(check.policy.params(), now, until, u64::from(check.cost));
            }
            return decisions;
        }
        // Stored as check_now stores: a tracked key always (its state may have been renewed
        // after expiry), a new key only once allowed.
        pending.retain(|p| p.tracked || p.allowed);
        for p in &pending {
            if let Some((_, shard)) = guards.iter_mut().find(|(i, _)| *i == p.shard) {
                self.make_room_for(shard, p.map_key, now);
            }
        }
        for p in pending {
            if let Some((_, shard)) = guards.iter_mut().find(|(i, _)| *i == p.shard) {
                let expires_at = p.state.expires_at(p.params);
                let tracked = Tracked {
                    state: p.state,
                    expires_at,
                    blocked_until: None,
                };
                shard.entries.insert(p.map_key.to_owned(), tracked);
            }
        }
        decisions
    }
}

/// A state to store if the stacked decision is not blocked.
struct Pending<'a> {
    map_key: &'a str,
    shard: usize,
    state: State,
    params: &'a Params,
    /// Whether the key was tracked when the decision began.
    tracked: bool,
    /// Whether any check of this key was allowed.
    allowed: bool,
}
