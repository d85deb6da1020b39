//! Errors: [`ConfigError`] when building, [`StoreError`] when a store cannot decide.

use std::fmt;

/// A configuration that cannot work, found while building (never later, on a request).
///
/// The message says what is wrong and what is allowed, e.g.
/// `invalid quota "10/fortnight": unknown period unit "fortnight" (use ms, s, min, h or day)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    message: String,
}

impl ConfigError {
    /// A configuration error with the given explanation.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The explanation, as shown by `Display`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` in front, e.g. the rule or field it came from.
    #[must_use]
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self::new(format!("{context}: {}", self.message))
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Why a store could not decide. The layer answers these by its `OnStoreError` policy.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within the configured timeout.
    Timeout,
    /// The circuit breaker is open: the store failed repeatedly and is not being called.
    CircuitOpen,
    /// The backend failed (connection refused, protocol error, script error, …).
    Backend(Box<dyn std::error::Error + Send + Sync>),
}

impl StoreError {
    /// A backend failure from any error type.
    pub fn backend(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend(error.into())
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("rate limit store timed out"),
            Self::CircuitOpen => f.write_str("rate limit store circuit breaker is open"),
            Self::Backend(e) => write!(f, "rate limit store failed: {e}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Backend(e) => Some(&**e),
            _ => None,
        }
    }
}
