//! [`HeldSlot`]: one slot of a request in flight, as the store contract names it.

use crate::quota::InFlight;

/// A slot an instance holds: the client key (already sanitized), the limit it is held under,
/// and its id (chosen by the instance when it took it, unique across instances).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldSlot<'a> {
    pub(crate) key: &'a str,
    pub(crate) limit: &'a InFlight,
    pub(crate) id: u64,
}
