//! [`Check`]: one limit of a decision, as the store contract takes it.

use crate::quota::Policy;

/// One limit of a stacked decision: a client key under a policy, at a cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Check<'a> {
    /// The client key (already sanitized).
    pub(crate) key: &'a str,
    /// The policy to check it against.
    pub(crate) policy: &'a Policy,
    /// The request's cost (≥ 1).
    pub(crate) cost: u32,
    /// Whether a denial by this check blocks the request. Shadow-mode limits are checked and
    /// counted but never block, so their denial must not keep the others from counting.
    pub(crate) blocking: bool,
    /// Whether a denial of this check still records its cost ("charged while over", see
    /// `State::charge`), as Envoy's rate limit service counts every hit. Only the engine's charging modes for Envoy's service set it;
    /// the layer's refused requests consume nothing.
    pub(crate) charge: bool,
}

impl<'a> Check<'a> {
    /// A blocking check of `key` under `policy` at `cost`.
    pub(crate) fn new(key: &'a str, policy: &'a Policy, cost: u32) -> Self {
        Self {
            key,
            policy,
            cost,
            blocking: true,
            charge: false,
        }
    }

    /// Whether a denial by this check blocks the request (default true).
    pub(crate) fn blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }

    /// Whether a denial of this check still records its cost (default false).
    pub(crate) fn charge(mut self, charge: bool) -> Self {
        self.charge = charge;
        self
    }
}
