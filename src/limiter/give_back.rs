//! [`GiveBack`]: the places a request holds in its rules' delay queues, given back if it is
//! dropped before its turn comes.

use std::fmt;
use std::sync::Arc;

use super::Limiter;
use crate::quota::Policy;

/// One place in a delay-mode rule's queue: the client key, the policy the store enforces for
/// the rule (its leaky bucket with the queue), and the request's cost.
pub(crate) struct Place {
    pub(crate) key: String,
    pub(crate) policy: Policy,
    pub(crate) cost: u32,
}

/// The places a request waiting in delay mode holds. Dropped while the request waits (its
/// client hung up, a deadline passed), they are refunded in a task of their own, so that the
/// next request takes the slot instead of queueing behind one that will never go. Once the
/// request's turn comes they are [kept](Self::keep). Boxed: few requests wait.
#[derive(Default)]
pub(crate) struct GiveBack(Option<Box<Held>>);

struct Held {
    limiter: Arc<Limiter>,
    places: Vec<Place>,
}

impl GiveBack {
    pub(crate) fn new(limiter: Arc<Limiter>, places: Vec<Place>) -> Self {
        if places.is_empty() {
            Self(None)
        } else {
            Self(Some(Box::new(Held { limiter, places })))
        }
    }

    /// The request's turn came: its places were used.
    pub(crate) fn keep(&mut self) {
        self.0 = None;
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        let Some(held) = self.0.take() else {
            return;
        };
        // Outside a Tokio runtime (no Redis store can run there either), the places stay
        // taken, as they were before a request could give them back.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            for place in &held.places {
                // A store error is the store's to count and log; the place then stays taken.
                let _ = (held.limiter.engine)
                    .refund(&place.key, &place.policy, place.cost)
                    .await;
            }
        });
    }
}

impl fmt::Debug for GiveBack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let places = self.0.as_ref().map_or(0, |held| held.places.len());
        f.debug_struct("GiveBack").field("places", &places).finish()
    }
}
