//! [`InMemory`]: the engine's shortest way, for a policy its memory store alone decides.

use super::Engine;
use crate::decision::Decision;
use crate::store::wrappers::Backend;
use crate::store::{MemoryStore, Policy};

/// Decides one policy's asks of cost 1 in the engine's memory store directly: what
/// [`Engine::decide_ready`] decides for them, without passing through the wrappers, which would
/// only pass the check on (see [`Engine::in_memory`]).
pub(crate) struct InMemory<'a> {
    store: &'a MemoryStore,
    policy: &'a Policy,
}

impl InMemory<'_> {
    /// `key`'s decision at cost 1, charged if allowed.
    #[inline]
    pub(crate) fn decide(&self, key: &str) -> Decision {
        self.store.check_now(key, self.policy, 1)
    }
}

impl Engine {
    /// The way to decide `policy`'s asks in the memory store directly, when it alone decides
    /// them: the store is the memory store, the policy is not leased and the circuit is closed
    /// (as it stays: the memory store never fails), and the memory store has no cache of
    /// denials. `None`: ask [`decide_ready`](Self::decide_ready) or
    /// [`decide`](Self::decide). The layer's usual request takes it (see `Limiter::express`).
    #[inline]
    pub(crate) fn in_memory<'a>(&'a self, policy: &'a Policy) -> Option<InMemory<'a>> {
        let resilient = self.store.resilient();
        if policy.lease().is_some() || resilient.circuit_open() {
            return None;
        }
        match resilient.get_ref() {
            Backend::Memory(store) => Some(InMemory { store, policy }),
            _ => None,
        }
    }
}
