//! Requests in flight on Redis: one call of `src/store/redis/lua/in_flight.lua` takes a slot, one gives it
//! back, one renews the leases of a batch of slots (one per client key on a cluster, where a
//! script touches one hash slot only).

use super::script::{evalsha, Call};
use super::RedisStore;
use crate::algorithm::slots::slot_decision;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::InFlight;
use crate::store::contract::InFlightSlots;
use crate::store::slot::HeldSlot;

impl RedisStore {
    /// The Redis key that holds the slots of `client_key`'s requests in flight under `limit`:
    /// `<prefix>:<limit name>:slots:{<client key>}`, a sorted set of slot ids scored by when
    /// their leases end (see `src/store/redis/lua/in_flight.lua`).
    pub fn slots_key(&self, limit: &InFlight, client_key: &str) -> String {
        format!("{}:{}:slots:{{{}}}", self.prefix, limit.name(), client_key)
    }

    /// One call of the in-flight script on `keys`: `op`, the time, then `args`.
    fn slots_call(&self, keys: &[String], op: &str, args: &[u64]) -> Call<'_> {
        let script = &self.scripts().in_flight;
        let mut command = evalsha(script, keys);
        command.arg(op).arg(self.now_arg()).arg(args);
        Call::new(script, command)
    }
}

impl InFlightSlots for RedisStore {
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        let keys = [self.slots_key(limit, key)];
        let args = [u64::from(limit.max()), limit.ttl_us(), id];
        let reply = self.eval(self.slots_call(&keys, "take", &args)).await?;
        let &[taken, held] = reply.as_slice() else {
            return Err(unexpected(&reply, 2));
        };
        let held = u32::try_from(held).unwrap_or(u32::MAX);
        Ok(slot_decision(taken == 1, limit.max(), held))
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        let keys = [self.slots_key(limit, key)];
        let reply = self.eval(self.slots_call(&keys, "give", &[id])).await?;
        match reply.as_slice() {
            [_] => Ok(()),
            _ => Err(unexpected(&reply, 1)),
        }
    }

    /// One call for every slot (one per client key on a cluster).
    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        // The slots grouped by key, in the order first seen: (key, ttl, ids).
        let mut groups: Vec<(String, u64, Vec<u64>)> = Vec::new();
        for slot in slots {
            let key = self.slots_key(slot.limit, slot.key);
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, _, ids)) => ids.push(slot.id),
                None => groups.push((key, slot.limit.ttl_us(), vec![slot.id])),
            }
        }
        #[cfg(feature = "cluster")]
        if self.shared.connection.is_cluster() {
            for group in groups {
                self.renew(std::slice::from_ref(&group)).await?;
            }
            return Ok(());
        }
        self.renew(&groups).await
    }
}

impl RedisStore {
    /// One renewal call for `groups` of (key, ttl, ids).
    async fn renew(&self, groups: &[(String, u64, Vec<u64>)]) -> Result<(), StoreError> {
        if groups.is_empty() {
            return Ok(());
        }
        let keys: Vec<String> = groups.iter().map(|(key, _, _)| key.clone()).collect();
        let mut args = Vec::new();
        for (_, ttl, ids) in groups {
            args.extend([*ttl, ids.len() as u64]);
            args.extend(ids);
        }
        let reply = self.eval(self.slots_call(&keys, "renew", &args)).await?;
        match reply.as_slice() {
            [_] => Ok(()),
            _ => Err(unexpected(&reply, 1)),
        }
    }
}

/// The error for a reply that is not `n` integers.
fn unexpected(reply: &[i64], n: usize) -> StoreError {
    StoreError::backend(format!(
        "unexpected in-flight script reply {reply:?} (expected {n} integers)"
    ))
}
