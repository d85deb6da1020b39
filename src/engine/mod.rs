//! The engine: the one place tollgate decides, for every front end. The layer's limiter,
//! Envoy's services (`tollgate-rls`) and code outside Tower (through
//! [`Control`](crate::Control), the door) ask it the same way, and none of them calls a store.
//!
//! An [`Engine`] owns the store in its wrappers, outermost first: a cache of denials, leases
//! for hot keys, then failure handling (timeout, circuit breaker, fail open / closed / local
//! fallback) around the store's backend (a built-in store called directly, any other
//! [`Store`] through exact defaults). It offers a few operations:
//!
//! - [`decide`](Engine::decide) a set of [`Ask`]s together, charged as a [`Charging`] mode
//!   says (one script call on Redis, one locked step in memory), and
//!   [`decide_one`](Engine::decide_one) for the common request under one limit;
//! - [`decide_ready`](Engine::decide_ready): the decision when it can be made without waiting
//!   (memory, a cached denial, a lease in hand), and [`decide_now`](Engine::decide_now), as
//!   much for a set of asks in any charging mode;
//! - [`peek`](Engine::peek), [`reset`](Engine::reset), [`block`](Engine::block),
//!   [`refund`](Engine::refund) one client;
//! - costs known after the response: [`settle`](Engine::settle) what a request reserved at
//!   the cost it turned out to have, in one store call;
//! - requests in flight: [`take_slot`](Engine::take_slot),
//!   [`give_back_slot`](Engine::give_back_slot) and [`renew_slots`](Engine::renew_slots)
//!   (see [`InFlight`](crate::store::InFlight));
//! - its figures, [`stats`](Engine::stats).
//!
//! A front end plans (which limits, which keys, what cost) and renders (headers, a 429 or 503,
//! a gRPC status); the engine decides.
//!
//! ```
//! use tollgate::engine::{Ask, Charging, Engine};
//! use tollgate::store::Policy;
//! use tollgate::{Algorithm, Quota};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder().build()?; // a MemoryStore, failing open after 50 ms
//! let per_user = Policy::new("per_user", Quota::per_minute(2)?, Algorithm::Gcra)?;
//! let global = Policy::new("global", Quota::per_minute(100)?, Algorithm::FixedWindow)?;
//! let asks = [Ask::new("alice", &per_user, 1), Ask::new("all", &global, 1)];
//! for _ in 0..2 {
//!     let decisions = engine.decide(&asks, Charging::AllowedOnly).await?;
//!     assert!(decisions.iter().all(|d| d.allowed));
//! }
//! // The third is refused by `per_user`, and consumes nothing from `global`.
//! let decisions = engine.decide(&asks, Charging::AllowedOnly).await?;
//! assert!(!decisions[0].allowed);
//! assert_eq!(engine.peek("all", &global, 1).await?.remaining, 97);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::contract::StoreExt;
use crate::store::wrappers::Wrapped;
use crate::store::{OnStoreError, Store};

mod ask;
mod charging;
mod decide;
mod in_memory;
mod overrides;
mod settle;
mod setup;
mod slots;
mod stats;

pub use ask::Ask;
pub use charging::Charging;
pub(crate) use in_memory::InMemory;
pub use overrides::OVERRIDE_TTL;
pub use setup::EngineBuilder;
pub use slots::Slot;
pub use stats::Stats;

/// Decides through the wrapped store: every decision, peek and change of one client of every
/// front end goes through one. Cheap to share behind an `Arc`; built by
/// [`Engine::builder`].
pub struct Engine {
    /// The store inside the failure handling, behind the leases for hot keys and the cache
    /// of denials. Private: front ends ask the engine, never the store.
    store: Wrapped,
    /// What the front ends answer while the store cannot decide and nothing falls back.
    on_error: OnStoreError,
    /// Requests a shadow-mode limit would have refused, as the front ends report them.
    shadow_denials: AtomicU64,
    /// The longest a store call may take: what a request waiting for another's read of an
    /// override waits at most.
    timeout: Duration,
    /// What this instance read of the quotas set for clients (see `set_quota`).
    overrides: overrides::OverrideCache,
    /// Quota lookups, as the front ends count them.
    lookups: Arc<LookupCounts>,
    /// The slots of requests in flight it holds.
    slots: slots::SlotBook,
}

/// The counts of quota lookups (see [`Stats`]).
#[derive(Debug, Default)]
pub(crate) struct LookupCounts {
    pub(crate) made: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) failures: AtomicU64,
}

impl Engine {
    /// A builder: the store (default: a new [`MemoryStore`](crate::store::MemoryStore)), how
    /// its failures are handled, and the cache of denials.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// What the client `key` has left under `policy` for a request of `cost`, consuming
    /// nothing: the decision a [`decide_one`](Self::decide_one) at this instant would give.
    pub async fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        self.store.peek(key, policy, cost).await
    }

    /// Forgets the state of `key` under `policy`, and any block.
    pub async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.store.reset(key, policy).await
    }

    /// Denies every request of `key` under `policy` for `duration` from now.
    pub async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        self.store.block(key, policy, duration).await
    }

    /// Gives `n` units back to `key` under `policy`, as far as the algorithm allows (see
    /// [`Control::refund`](crate::Control::refund)).
    pub async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.store.refund(key, policy, n).await
    }

    /// What a front end answers while the store cannot decide: with
    /// [`OnStoreError::FallbackToMemory`] the engine decides in memory meanwhile and never
    /// returns a store error; with [`Allow`](OnStoreError::Allow) or
    /// [`Deny`](OnStoreError::Deny) it returns the error, and the front end lets the request
    /// through or refuses it.
    pub fn on_store_error(&self) -> OnStoreError {
        self.on_error
    }

    /// Counts a request that a shadow-mode limit would have refused (reported in
    /// [`Stats::shadow_denials`]).
    pub fn count_shadow_denial(&self) {
        self.shadow_denials.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts of quota lookups, which the front ends that look quotas up keep.
    pub(crate) fn lookup_counts(&self) -> &Arc<LookupCounts> {
        &self.lookups
    }

    /// The engine's figures now.
    pub fn stats(&self) -> Stats {
        let resilient = self.store.resilient();
        Stats {
            store_errors: resilient.errors(),
            circuit_open: resilient.circuit_open(),
            denial_cache_hits: self.store.hits(),
            shadow_denials: self.shadow_denials.load(Ordering::Relaxed),
            quota_lookups: self.lookups.made.load(Ordering::Relaxed),
            quota_lookup_cache_hits: self.lookups.cache_hits.load(Ordering::Relaxed),
            quota_lookup_failures: self.lookups.failures.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("store", self.store.resilient())
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}
