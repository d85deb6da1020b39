//! Slots of requests in flight through the failure handling: each call within the timeout and
//! through the breaker; while the store is away, slots are taken in the fallback (with
//! [`OnStoreError::FallbackToMemory`](super::OnStoreError::FallbackToMemory)) and given back
//! there.

use std::sync::PoisonError;

use super::Resilient;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::InFlight;
use crate::store::contract::InFlightSlots;
use crate::store::slot::HeldSlot;

impl<S: InFlightSlots> InFlightSlots for Resilient<S> {
    /// Takes the slot in the store; when it fails, in the fallback (a limit per instance
    /// meanwhile), or the error for the limiter to answer by its policy.
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        (self.call(|| self.inner.take_slot(key, limit, id)).await).or_else(|error| {
            self.fall_back(error, |fallback| {
                let decision = fallback.take_slot_now(key, limit);
                if decision.allowed {
                    self.fallback_slots().insert(id);
                }
                decision
            })
        })
    }

    /// Gives the slot back where it was taken. A store that fails keeps the slot until its
    /// lease ends (it is no longer renewed); the failure is counted and logged.
    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        if self.give_back_to_fallback(key, limit, id) {
            return Ok(());
        }
        let given = self
            .call(|| self.inner.give_back_slot(key, limit, id))
            .await;
        if let Err(error) = &given {
            self.failed(error);
        }
        given
    }

    /// At once when the slot was taken in the fallback, or the store can (and its circuit is
    /// closed).
    fn give_back_slot_now(&self, key: &str, limit: &InFlight, id: u64) -> bool {
        self.give_back_to_fallback(key, limit, id)
            || (!self.breaker.is_open() && self.inner.give_back_slot_now(key, limit, id))
    }

    /// Renews the slots held in the store (not those in the fallback), in one bounded call.
    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        let in_store: Vec<HeldSlot<'_>> = match &self.fallback {
            None => slots.to_vec(),
            Some(_) => {
                let local = self.fallback_slots();
                (slots.iter())
                    .filter(|s| !local.contains(&s.id))
                    .copied()
                    .collect()
            }
        };
        if in_store.is_empty() {
            return Ok(());
        }
        let renewed = self.call(|| self.inner.renew_slots(&in_store)).await;
        if let Err(error) = &renewed {
            self.failed(error);
        }
        renewed
    }
}

impl<S: InFlightSlots> Resilient<S> {
    /// Gives the slot back to the fallback if it was taken there: whether it was.
    fn give_back_to_fallback(&self, key: &str, limit: &InFlight, id: u64) -> bool {
        let Some(fallback) = &self.fallback else {
            return false;
        };
        if !self.fallback_slots().remove(&id) {
            return false;
        }
        fallback.give_back_slot_now(key, limit, id)
    }

    fn fallback_slots(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<u64>> {
        // A set of ids is never left half-changed: a panic elsewhere does not spoil it.
        self.fallback_slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::wrappers::tests::Remote;
    use crate::store::wrappers::{Backend, OnStoreError, StoreFailure};

    /// A user's store has no slots: its error is answered by the failure handling, here by a
    /// limit per instance in the fallback, given back there.
    #[tokio::test]
    async fn slots_are_taken_and_given_back_in_the_fallback_while_the_store_cannot() {
        let failure = StoreFailure::new(OnStoreError::FallbackToMemory)
            .timeout(Duration::from_millis(20))
            .open_after(100);
        let store = Resilient::new(Backend::of(Remote::new())).failure(&failure);
        let limit = InFlight::new("slow", 1).unwrap();
        assert!(store.take_slot("k", &limit, 1).await.unwrap().allowed);
        assert!(!store.take_slot("k", &limit, 2).await.unwrap().allowed);
        // Taken in the fallback: given back there at once, and never renewed in the store.
        store
            .renew_slots(&[HeldSlot {
                key: "k",
                limit: &limit,
                id: 1,
            }])
            .await
            .unwrap();
        assert!(store.give_back_slot_now("k", &limit, 1));
        assert!(store.take_slot("k", &limit, 3).await.unwrap().allowed);
        store.give_back_slot("k", &limit, 3).await.unwrap();
        assert!(store.take_slot("k", &limit, 4).await.unwrap().allowed);
        assert_eq!(store.errors(), 4);
        // Failing open instead: the error, for the limiter to answer.
        let open = Resilient::new(Backend::of(Remote::new())).failure(&StoreFailure::default());
        assert!(matches!(
            open.take_slot("k", &limit, 1).await,
            Err(StoreError::Unsupported(_))
        ));
    }
}
