//! Requests in flight, as the engine keeps them: [`Slot`]s taken, given back and renewed
//! through the store, and the book of the slots this engine holds, which
//! [`renew_slots`](Engine::renew_slots) keeps alive in a shared store.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use super::Engine;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::InFlight;
use crate::store::contract::InFlightSlots;
use crate::store::slot::HeldSlot;

/// One slot of a request in flight: an id unique across instances, made by
/// [`Engine::new_slot`], taken with [`Engine::take_slot`] and given back with
/// [`Engine::give_back_slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot(u64);

/// The slots an engine holds (for their renewal), where new ids come from, and the signal
/// of a slot given back (for requests waiting for one).
pub(super) struct SlotBook {
    /// The next id: from a random start per engine, so that instances' ids never meet.
    next: AtomicU64,
    held: Mutex<HashMap<u64, (String, InFlight)>>,
    given_back: Notify,
}

impl Default for SlotBook {
    fn default() -> Self {
        Self {
            next: AtomicU64::new(RandomState::new().hash_one(std::process::id())),
            held: Mutex::default(),
            given_back: Notify::new(),
        }
    }
}

impl SlotBook {
    fn held(&self) -> MutexGuard<'_, HashMap<u64, (String, InFlight)>> {
        // A map of ids is never left half-changed: a panic elsewhere does not spoil it.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Requests in flight (see [`InFlight`]).
impl Engine {
    /// A new slot, not yet taken: its id is unique across instances.
    pub fn new_slot(&self) -> Slot {
        Slot(self.slots.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Takes `slot` of the client `key` under `limit` if fewer than `limit.max()` of its
    /// requests are in flight, in one atomic step (one script call on Redis): allowed, with
    /// what is left, and the slot is held, renewed by [`renew_slots`](Self::renew_slots)
    /// until it is given back; or refused, holding nothing, with a `retry_after` hint of a
    /// second. A slot is taken once.
    ///
    /// # Errors
    ///
    /// The store's error when it could not decide and nothing fell back, as for
    /// [`decide`](Self::decide). A call that timed out may still have taken the slot in the
    /// store: give it back all the same, or its lease keeps it until it ends.
    pub async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        slot: Slot,
    ) -> Result<Decision, StoreError> {
        let decision = self.store.take_slot(key, limit, slot.0).await?;
        if decision.allowed {
            (self.slots.held()).insert(slot.0, (key.to_owned(), limit.clone()));
        }
        Ok(decision)
    }

    /// Gives `slot` of `key` under `limit` back (nothing if it is not held), and wakes the
    /// requests waiting for a slot in this engine.
    ///
    /// # Errors
    ///
    /// The store's error: the slot then stays taken until its lease ends (it is no longer
    /// renewed).
    pub async fn give_back_slot(
        &self,
        key: &str,
        limit: &InFlight,
        slot: Slot,
    ) -> Result<(), StoreError> {
        self.slots.held().remove(&slot.0);
        let given = self.store.give_back_slot(key, limit, slot.0).await;
        self.slots.given_back.notify_waiters();
        given
    }

    /// Gives `slot` back at once, in this process, when the store can (the memory store, a
    /// slot taken in the fallback while the store was away): whether it did. `false`: nothing
    /// was done, and the slot needs [`give_back_slot`](Self::give_back_slot).
    pub fn give_back_slot_now(&self, key: &str, limit: &InFlight, slot: Slot) -> bool {
        let given = self.store.give_back_slot_now(key, limit, slot.0);
        if given {
            self.slots.held().remove(&slot.0);
            self.slots.given_back.notify_waiters();
        }
        given
    }

    /// Renews the lease of every slot this engine holds, in one batch (one script call on a
    /// standalone Redis). Call it every [`slot_renewal_interval`](Self::slot_renewal_interval)
    /// while slots are held (the layer does).
    ///
    /// # Errors
    ///
    /// The store's error; slots not renewed in time come back to every instance when their
    /// leases end.
    pub async fn renew_slots(&self) -> Result<(), StoreError> {
        let held: Vec<(u64, String, InFlight)> = (self.slots.held().iter())
            .map(|(id, (key, limit))| (*id, key.clone(), limit.clone()))
            .collect();
        if held.is_empty() {
            return Ok(());
        }
        let slots: Vec<HeldSlot<'_>> = (held.iter())
            .map(|(id, key, limit)| HeldSlot {
                key,
                limit,
                id: *id,
            })
            .collect();
        self.store.renew_slots(&slots).await
    }

    /// How often the slots held now need renewing: a third of the shortest lease among them;
    /// `None` when none is held.
    pub fn slot_renewal_interval(&self) -> Option<Duration> {
        (self.slots.held().values())
            .map(|(_, limit)| limit.ttl() / 3)
            .min()
    }

    /// Completes when a slot is next given back in this engine (register it before trying,
    /// so that none is missed): what a request waiting for a slot waits on, besides a poll.
    pub(crate) fn slot_given_back(&self) -> Notified<'_> {
        self.slots.given_back.notified()
    }
}
