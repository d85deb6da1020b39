//! [`Overrides`]: the quotas set for clients at run time, in this process (see
//! `QuotaOverrides`): one instance sees them, as it is the only one deciding on the store.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::quota::Quota;

/// Overrides by rule and client key, with when each ends (µs; `None`: never). Set by an admin,
/// not by requests, so there are few; an expired one is dropped when it is read or when another
/// is set.
#[derive(Default)]
pub(super) struct Overrides(Mutex<HashMap<Client, (Quota, Option<u64>)>>);

/// A rule's name and a client key.
type Client = (Box<str>, Box<str>);

impl Overrides {
    /// The quota set for `key` under `rule` at `now`, if any.
    pub(super) fn get(&self, rule: &str, key: &str, now: u64) -> Option<Quota> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let id = (Box::from(rule), Box::from(key));
        match map.get(&id) {
            Some(&(quota, until)) if until.is_none_or(|until| until > now) => Some(quota),
            Some(_) => {
                map.remove(&id);
                None
            }
            None => None,
        }
    }

    /// Sets `quota` for `key` under `rule` until `until` (µs), or clears it.
    pub(super) fn set(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        until: Option<u64>,
        now: u64,
    ) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, (_, until)| until.is_none_or(|until| until > now));
        let id = (Box::from(rule), Box::from(key));
        match quota {
            Some(quota) => {
                map.insert(id, (quota, until));
            }
            None => {
                map.remove(&id);
            }
        }
    }
}
