//! [`Slots`]: the slots of requests in flight one request holds, given back when it is dropped,
//! whenever that is: its response body ended or failed, its client hung up, its handler
//! panicked, or it was refused after all.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use super::Limiter;
use crate::engine::Slot;
use crate::quota::InFlight;
use crate::telemetry;

/// The slots a request holds. Dropped, they are given back: at once when the store can (the
/// memory store), else in a task of its own (outside a Tokio runtime, where no shared store
/// runs, they stay taken until their leases end). Boxed: few requests hold slots.
#[derive(Default)]
pub(crate) struct Slots(Option<Box<Held>>);

struct Held {
    limiter: Arc<Limiter>,
    slots: SmallVec<[Taken; 1]>,
}

/// One slot: the client key, the limit, the slot, and whether the store answered that it
/// was taken (counted in the gauge), or may have taken it (a call that timed out).
struct Taken {
    key: String,
    limit: InFlight,
    slot: Slot,
    counted: bool,
}

impl Slots {
    /// Holds `slot` of `key` under `limit` from before it is asked for, so that a call
    /// cancelled or timed out after the store took it still gives it back.
    pub(super) fn hold(&mut self, limiter: &Arc<Limiter>, key: &str, limit: &InFlight, slot: Slot) {
        let held = self.0.get_or_insert_with(|| {
            Box::new(Held {
                limiter: Arc::clone(limiter),
                slots: SmallVec::new(),
            })
        });
        held.slots.push(Taken {
            key: key.to_owned(),
            limit: limit.clone(),
            slot,
            counted: false,
        });
    }

    /// The store took the slot held last.
    pub(super) fn taken(&mut self) {
        if let Some(taken) = self.0.as_mut().and_then(|held| held.slots.last_mut()) {
            taken.counted = true;
            telemetry::slots_held(taken.limit.shared_name(), 1.0);
        }
    }

    /// The store did not take the slot held last: nothing to give back.
    pub(super) fn not_taken(&mut self) {
        if let Some(held) = self.0.as_mut() {
            held.slots.pop();
        }
    }

    /// Whether a slot is held.
    pub(crate) fn is_held(&self) -> bool {
        self.0.as_ref().is_some_and(|held| !held.slots.is_empty())
    }

    /// The slots, as a value that gives them back when dropped and names nothing of the
    /// limiter: what a response body holds until it ends.
    pub(crate) fn into_guard(self) -> Option<Box<dyn Send + Sync>> {
        self.0.map(|held| held as Box<dyn Send + Sync>)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let engine = &self.limiter.engine;
        let mut later: SmallVec<[Taken; 1]> = SmallVec::new();
        for taken in self.slots.drain(..) {
            if taken.counted {
                telemetry::slots_held(taken.limit.shared_name(), -1.0);
            }
            if !engine.give_back_slot_now(&taken.key, &taken.limit, taken.slot) {
                later.push(taken);
            }
        }
        if later.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let limiter = Arc::clone(&self.limiter);
        runtime.spawn(async move {
            for taken in later {
                // A store error is the store's to count and log; the slot's lease then ends
                // by itself, as it is no longer renewed.
                let _ = (limiter.engine)
                    .give_back_slot(&taken.key, &taken.limit, taken.slot)
                    .await;
            }
        });
    }
}

impl fmt::Debug for Slots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.0.as_ref().map_or(0, |held| held.slots.len());
        f.debug_struct("Slots").field("held", &held).finish()
    }
}
