//! Which keys the service counts in: the reference's own (the default), so that reference
//! instances and this service share each count during a rolling swap, or tollgate's.

use super::service_builder::RateLimitServiceBuilder;

impl RateLimitServiceBuilder {
    /// Whether fixed windows count in the reference's own keys (default true), as
    /// [plain counters](tollgate::store::Policy::with_plain_counter) at
    /// `<cache_key_prefix><domain>_<key>_<value>_…<window start>`, shared with reference
    /// instances on one store during a swap. Limits with tollgate's extensions count in
    /// tollgate's keys either way; false: all do, each request in one atomic script call.
    pub fn reference_counters(mut self, on: bool) -> Self {
        self.modes.reference_counters = on;
        self
    }

    /// The reference's `CACHE_KEY_PREFIX` (default empty), before every key in its layout
    /// (tollgate's keys take the store's own prefix).
    pub fn cache_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.cache_key_prefix = prefix.into();
        self
    }
}
