//! [`kept`]: a rule's `RateLimit-Policy` item, kept for the life of the process, so that a
//! request copies a pointer to it instead of counting a reference (an atomic increment when
//! the value is copied into the response, and a decrement when the response is dropped).

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use bytes::Bytes;
use http::HeaderValue;

/// At most this many distinct values are kept: a process that compiles more rules than that
/// (rules files reloaded with ever new quotas) counts references to the newer ones instead.
/// So what is kept stays under a megabyte.
const MOST: usize = 4096;

/// Values longer than this are not kept (a policy's item is a name of at most 64 bytes and
/// two numbers).
const LONGEST: usize = 200;

/// Every value kept, each once: rules compiled again (a reload) with the same quotas share
/// them.
static KEPT: LazyLock<Mutex<HashSet<&'static HeaderValue>>> = LazyLock::new(Mutex::default);

/// `value`, held for the life of the process, or `value` itself when too many are (or it is
/// too long). Equal either way: only what a copy costs differs.
pub(crate) fn kept(value: HeaderValue) -> HeaderValue {
    kept_static(&value).map_or(value, HeaderValue::clone)
}

/// `value` held for the life of the process, borrowed for as long (see [`kept`]); `None` when
/// too many are held (or it is too long). Its clones copy a pointer to the bytes.
pub(crate) fn kept_static(value: &HeaderValue) -> Option<&'static HeaderValue> {
    let bytes = value.as_bytes();
    if bytes.len() > LONGEST {
        return None;
    }
    let mut kept = KEPT.lock().ok()?;
    if let Some(held) = kept.get(value) {
        return Some(held);
    }
    if kept.len() >= MOST {
        return None;
    }
    let held: &'static [u8] = Box::leak(Box::from(bytes));
    let held = HeaderValue::from_maybe_shared(Bytes::from_static(held)).ok()?;
    let held: &'static HeaderValue = Box::leak(Box::new(held));
    kept.insert(held);
    Some(held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_value_is_the_same_value_and_kept_once() {
        let made = || HeaderValue::from_str("\"kept-test\";q=10;w=1").unwrap();
        let (a, b) = (kept(made()), kept(made()));
        assert_eq!(a, made());
        assert_eq!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr(), "one copy");
        let long = HeaderValue::from_bytes(&[b'a'; LONGEST + 1]).unwrap();
        assert_eq!(kept(long.clone()), long);
        let held = kept_static(&made()).unwrap();
        assert_eq!(
            held.as_bytes().as_ptr(),
            a.as_bytes().as_ptr(),
            "the same copy"
        );
        assert_eq!(kept_static(&long), None);
    }
}
