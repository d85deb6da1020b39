//! [`Ask`]: one limit of a decision, as a front end plans it.

use crate::quota::Policy;

/// One limit of a request: a client key under a policy, at a cost, and whether its denial
/// refuses the request. A look ([`look`](Self::look), or any ask of cost 0, Envoy's
/// `hits_addend: 0`) is decided at its cost but consumes nothing: e.g. a limit counted once
/// the response is known. A limit that does not refuse (a shadow-mode or
/// quota-mode limit) is still decided and counted.
///
/// The key is used as given: a front end that takes keys from clients sanitizes them first,
/// as the layer does (`key::sanitize`).
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub(crate) key: &'a str,
    pub(crate) policy: &'a Policy,
    pub(crate) cost: u32,
    pub(crate) blocking: bool,
    look: bool,
}

impl<'a> Ask<'a> {
    /// A limit on `key` under `policy` at `cost` whose denial refuses the request.
    pub fn new(key: &'a str, policy: &'a Policy, cost: u32) -> Self {
        Self {
            key,
            policy,
            cost,
            blocking: true,
            look: false,
        }
    }

    /// Whether a denial of this limit refuses the request (default true); false for a
    /// shadow-mode limit, decided and counted but never refusing.
    pub fn blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }

    /// Whether this ask only looks (default false): decided at its cost, consuming nothing.
    pub fn look(mut self, look: bool) -> Self {
        self.look = look;
        self
    }

    /// Whether this ask consumes nothing: a [`look`](Self::look), or of cost 0.
    pub fn is_look(&self) -> bool {
        self.look || self.cost == 0
    }

    /// The client key.
    pub fn key(&self) -> &'a str {
        self.key
    }

    /// The policy it is decided by.
    pub fn policy(&self) -> &'a Policy {
        self.policy
    }

    /// The cost (0: a look).
    pub fn cost(&self) -> u32 {
        self.cost
    }
}
