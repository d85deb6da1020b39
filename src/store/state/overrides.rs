//! Quotas set for clients at run time (see `QuotaOverrides`), kept in the backend beside the
//! clients' states, so that every instance on it sees them.
//!
//! The key is `<prefix>:<rule>:quota:<client key>`, the value `L:P:B` (limit, period in µs,
//! burst or 0) and, for one that expires, `:<until>` (µs by the adapter's clock): a backend
//! may keep a key longer than asked (memcached counts whole seconds), never count it longer.

use std::time::Duration;

use super::access::StateAccess;
use super::{StateBacked, Update};
use crate::error::StoreError;
use crate::quota::Quota;
use crate::store::contract::LONGEST_OVERRIDE;

impl<S: StateAccess> StateBacked<S> {
    /// The quota set for `key` under the rule named `rule`, if any.
    pub(crate) async fn quota_override(
        &self,
        rule: &str,
        key: &str,
    ) -> Result<Option<Quota>, StoreError> {
        let key = self.quota_key(rule, key);
        let now = self.clock.now();
        let read = |bytes: Option<&[u8]>| {
            let Some((quota, until)) = bytes.map(until) else {
                return Ok((Update::Keep, None));
            };
            let quota = match until? > now {
                true => Some(Quota::from_stored(quota)?),
                false => None,
            };
            Ok((Update::Keep, quota))
        };
        self.backend.apply(&key, self.turn(&key), read).await
    }

    /// Sets (for `ttl`, or [`LONGEST_OVERRIDE`]) or clears the quota set for `key` under the
    /// rule named `rule`.
    pub(crate) async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let key = self.quota_key(rule, key);
        let Some(quota) = quota else {
            return self.backend.forget(&key).await;
        };
        let mut stored = quota.stored();
        if let Some(ttl) = ttl {
            let micros = u64::try_from(ttl.as_micros()).unwrap_or(u64::MAX);
            stored = format!("{stored}:{}", self.clock.now().saturating_add(micros));
        }
        let bytes = stored.into_bytes();
        let ttl = ttl
            .unwrap_or(LONGEST_OVERRIDE)
            .max(Duration::from_micros(1));
        let write = |_: Option<&[u8]>| {
            let (bytes, ttl) = (bytes.clone(), ttl);
            Ok((Update::Set { bytes, ttl }, ()))
        };
        self.backend.apply(&key, self.turn(&key), write).await
    }

    /// `<prefix>:<rule>:quota:<client key>`.
    fn quota_key(&self, rule: &str, key: &str) -> String {
        format!("{}:{rule}:quota:{key}", self.prefix)
    }
}

/// A stored override's quota, and until when it counts (`u64::MAX`: until cleared).
fn until(bytes: &[u8]) -> (&[u8], Result<u64, StoreError>) {
    let colons = bytes.iter().filter(|&&b| b == b':').count();
    match bytes.iter().rposition(|&b| b == b':') {
        Some(at) if colons == 3 => {
            let until = std::str::from_utf8(&bytes[at + 1..])
                .ok()
                .and_then(|u| u.parse().ok())
                .ok_or_else(|| {
                    let text = String::from_utf8_lossy(bytes);
                    StoreError::key_state(format!("{text:?} is no stored quota"))
                });
            (&bytes[..at], until)
        }
        _ => (bytes, Ok(u64::MAX)),
    }
}
