//! [`Decider`]: the one way tollgate's front ends reach a store. The layer's limiter and the
//! `rls` service each hold one, made from the same [`StoreSetup`] their builders embed, and
//! report the same [`Stats`] from it.
//!
//! It holds the store in its wrappers, outermost first: a cache of denials, leases for
//! hot keys, then failure handling (timeout, circuit breaker, fail open / closed / local
//! fallback) around the store's backend (a built-in store called directly, any other
//! [`Store`](crate::store::Store) through exact defaults).

use std::fmt;

use crate::store::wrappers::Wrapped;

mod setup;
mod stats;

pub(crate) use setup::StoreSetup;
pub use stats::Stats;

/// Decides through the wrapped store: every decision, peek and change of one client goes
/// through [`store`](Self::store).
pub(crate) struct Decider {
    /// The store inside the failure handling, behind the leases for hot keys and the cache
    /// of denials.
    pub(crate) store: Wrapped,
}

impl Decider {
    /// The figures of this decider's store, with the `shadow_denials` its owner counted.
    pub(crate) fn stats(&self, shadow_denials: u64) -> Stats {
        let resilient = self.store.resilient();
        Stats {
            store_errors: resilient.errors(),
            circuit_open: resilient.circuit_open(),
            denial_cache_hits: self.store.hits(),
            shadow_denials,
        }
    }
}

impl fmt::Debug for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decider")
            .field("store", self.store.resilient())
            .finish_non_exhaustive()
    }
}
