//! [`Counter`]: counts a request under its rules with `count_status`, once its response is
//! known, in a task of its own so that no hang-up can skip it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::StatusCode;

use super::Limiter;
use crate::engine::{Ask, Charging};
use crate::quota::Policy;
use crate::rules::StatusMatch;

/// A boxed future of nothing: the counting in progress.
pub(crate) type Counting = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One rule's count, made once the response has one of `statuses`.
pub(crate) struct Counted {
    pub(crate) statuses: Arc<[StatusMatch]>,
    pub(crate) key: String,
    pub(crate) policy: Policy,
    pub(crate) cost: u32,
}

/// What a request still owes its `count_status` rules; the response future starts it with the
/// response's status. Boxed: few rules count by status, and every request's future has room
/// for a counter.
pub(crate) struct Counter(Box<Owed>);

struct Owed {
    limiter: Arc<Limiter>,
    counted: Vec<Counted>,
}

impl Counter {
    pub(crate) fn new(limiter: Arc<Limiter>, counted: Vec<Counted>) -> Self {
        Self(Box::new(Owed { limiter, counted }))
    }

    /// Starts counting the rules that list `status`, if any: spawned at once on the runtime,
    /// so the count is made even if the returned future (the response's) is dropped. Awaiting
    /// it before sending the response means a client's next request sees the count.
    pub(crate) fn start(self, status: StatusCode) -> Option<Counting> {
        let Owed { limiter, counted } = *self.0;
        let counted: Vec<Counted> = counted
            .into_iter()
            .filter(|c| c.statuses.iter().any(|s| s.matches(status)))
            .collect();
        if counted.is_empty() {
            return None;
        }
        let count = count(limiter, counted);
        Some(match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let task = runtime.spawn(count);
                // A count that panicked was lost: nothing to add to the response.
                Box::pin(async move {
                    let _ = task.await;
                })
            }
            // Outside a Tokio runtime (no Redis store can run there either), in place.
            Err(_) => count,
        })
    }
}

/// One store call for every rule counted: each is consumed if its quota allows (none blocks
/// another), and a store error is the store's to log and count.
fn count(limiter: Arc<Limiter>, counted: Vec<Counted>) -> Counting {
    Box::pin(async move {
        let asks: Vec<Ask<'_>> = counted
            .iter()
            .map(|c| Ask::new(&c.key, &c.policy, c.cost).blocking(false))
            .collect();
        let _ = limiter.engine.decide(&asks, Charging::AllowedOnly).await;
    })
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("rules", &self.0.counted.len())
            .finish_non_exhaustive()
    }
}
