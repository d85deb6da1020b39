//! A policy's (or rule's) name, checked once: it is written into store keys and headers.

use crate::error::{ConfigError, ConfigErrorKind};

/// Checks a policy (or rule) name: 1–64 bytes of ASCII letters, digits, `-`, `_` or `.`,
/// because it is written into store keys and response headers.
pub(crate) fn check_policy_name(name: &str) -> Result<(), ConfigError> {
    let name_ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if name_ok {
        return Ok(());
    }
    Err(ConfigError::with_kind(
        ConfigErrorKind::Quota,
        format!("invalid policy name {name:?}: use 1 to 64 ASCII letters, digits, '-', '_' or '.'"),
    ))
}
