//! Requests in flight on a state store: a client's slots under one limit are one key's state
//! (the slots' ids and the ends of their leases, see the module docs' format), taken, given
//! back and renewed as one change of that key each.

use super::access::StateAccess;
use super::StateBacked;
use crate::algorithm::slots::slot_decision;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::InFlight;
use crate::store::slot::HeldSlot;

impl<S: StateAccess> StateBacked<S> {
    /// Takes slot `id` of `key` under `limit` if fewer than its `max` slots are held (see
    /// `InFlightSlots::take_slot`); a refusal writes nothing.
    pub(crate) async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        let (max, ttl) = (limit.max(), limit.ttl_us());
        self.update_slots(key, limit, |slots, now| {
            let (taken, held) = slots.take(now, max, ttl, id);
            (taken, slot_decision(taken, max, held))
        })
        .await
    }

    /// Gives slot `id` of `key` under `limit` back, if it is held.
    pub(crate) async fn give_back_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<(), StoreError> {
        self.update_slots(key, limit, |slots, _| (slots.give_back(id), ()))
            .await
    }

    /// Renews `slots`: one change of each client's key for all of its slots.
    pub(crate) async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        let mut done = vec![false; slots.len()];
        for (i, first) in slots.iter().enumerate() {
            if done[i] {
                continue;
            }
            let same = |s: &HeldSlot<'_>| s.key == first.key && s.limit == first.limit;
            let mut ids = Vec::new();
            for (j, slot) in slots.iter().enumerate().skip(i) {
                if !done[j] && same(slot) {
                    done[j] = true;
                    ids.push(slot.id);
                }
            }
            let ttl = first.limit.ttl_us();
            self.update_slots(first.key, first.limit, |held, now| {
                (held.renew(now, ttl, &ids) > 0, ())
            })
            .await?;
        }
        Ok(())
    }
}
