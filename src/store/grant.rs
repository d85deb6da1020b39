//! [`Grant`]: a store's answer to a lease request.

use crate::decision::Decision;

/// Units of a policy's quota that a store has consumed at once for one instance to spend
/// locally (see [`StoreExt::acquire`](super::StoreExt::acquire)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// Units granted; 0 when the store denied the lease.
    pub(crate) granted: u32,
    /// With units: the decision as if `granted` requests had been allowed back to back
    /// (`remaining` is what the store has left after them). Without: the store's denial of a
    /// request of the lease's smallest acceptable size, with its `retry_after`.
    pub(crate) decision: Decision,
    /// What a return needs to take units back exactly, in the store's µs: the lease's end in
    /// the TAT's time for the bucket algorithms, the window's start for the fixed windows.
    pub(crate) mark: u64,
}

impl Grant {
    /// A grant of `granted` units (0: denied) with the store's `decision` and `mark`.
    pub(crate) fn new(granted: u32, decision: Decision, mark: u64) -> Self {
        Self {
            granted,
            decision,
            mark,
        }
    }
}
