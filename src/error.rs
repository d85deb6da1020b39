//! Errors: [`ConfigError`] when building, [`StoreError`] when a store cannot decide.

use std::fmt;

/// A configuration that cannot work, found while building (never later, on a request).
///
/// The message says what is wrong and what is allowed, e.g.
/// `invalid quota "10/fortnight": unknown period unit "fortnight" (use ms, s, min, h or day)`;
/// [`kind`](Self::kind) says which part of the configuration it is about.
///
/// ```
/// use tollgate::{ConfigErrorKind, Quota};
///
/// let e = "10/fortnight".parse::<Quota>().unwrap_err();
/// assert_eq!(e.kind(), ConfigErrorKind::Quota);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    kind: ConfigErrorKind,
    message: String,
}

/// Which part of the configuration a [`ConfigError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// A quota: its text, limit, period or burst.
    Quota,
    /// A rule, a skip, or a rule's setting (algorithm, mode, key, cost, path, methods).
    Rule,
    /// A rules file: reading it, its TOML, or a value in it (the message has file:line:column).
    RulesFile,
    /// A store: a Redis URL (credentials redacted), or the store's settings.
    Store,
    /// Any other setting (a layer setting such as `store_timeout`, an environment variable).
    Other,
}

impl ConfigError {
    /// A configuration error of kind [`ConfigErrorKind::Other`] with the given explanation.
    pub fn new(message: impl Into<String>) -> Self {
        Self::with_kind(ConfigErrorKind::Other, message)
    }

    /// A configuration error of `kind` with the given explanation (e.g. from a store of
    /// your own: [`ConfigErrorKind::Store`]).
    pub fn with_kind(kind: ConfigErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// Which part of the configuration is wrong.
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// The explanation, as shown by `Display`.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` in front, e.g. the rule or field it came from.
    #[must_use]
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self::with_kind(self.kind, format!("{context}: {}", self.message))
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
    /// The backend failed (connection refused, broken connection, protocol error, …).
    Backend(Box<dyn std::error::Error + Send + Sync>),
    /// The backend is up but could not use this key's state (e.g. Redis `WRONGTYPE`, a
    /// corrupt value): this request's problem, not the store's, so the circuit breaker does
    /// not count it.
    KeyState(Box<dyn std::error::Error + Send + Sync>),
    /// The store does not support this operation: names it (e.g. `refund` through
    /// [`Control::refund`](crate::Control::refund) on a store of your own, which has no
    /// refund). A question for the store's author, not an outage, so the circuit breaker does
    /// not count it.
    Unsupported(&'static str),
}

impl StoreError {
    /// A backend failure from any error type.
    pub fn backend(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Backend(error.into())
    }

    /// A failure caused by one key's state (see [`StoreError::KeyState`]).
    pub fn key_state(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::KeyState(error.into())
    }

    /// Whether the store itself is failing (errors, timeouts, an open circuit), as opposed
    /// to one key's state being unusable; only these count toward the circuit breaker.
    pub fn is_store_failure(&self) -> bool {
        !matches!(self, Self::KeyState(_) | Self::Unsupported(_))
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("rate limit store timed out"),
            Self::CircuitOpen => f.write_str("rate limit store circuit breaker is open"),
            Self::Backend(e) => write!(f, "rate limit store failed: {e}"),
            Self::KeyState(e) => write!(f, "rate limit store cannot use this key's state: {e}"),
            Self::Unsupported(operation) => {
                write!(f, "rate limit store does not support {operation}")
            }
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Backend(e) | Self::KeyState(e) => Some(&**e),
            _ => None,
        }
    }
}

/// Why acting on one client through the layer (e.g. [`Control::peek`](crate::Control::peek))
/// failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ControlError {
    /// No rule in force has this name.
    UnknownRule {
        /// The name asked for.
        rule: String,
        /// The names of the rules in force.
        known: Vec<String>,
    },
    /// The store could not answer.
    Store(StoreError),
    /// The rule takes no quota set at run time: give it
    /// [`quota_from`](crate::rules::Rule::quota_from) or
    /// [`overridable`](crate::rules::Rule::overridable).
    NotOverridable {
        /// The rule's name.
        rule: String,
    },
    /// The quota does not fit the rule (a burst under an algorithm that has none).
    Quota(ConfigError),
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownRule { rule, known } => write!(
                f,
                "no rule named {rule:?} (the rules in force are: {})",
                known.join(", ")
            ),
            Self::Store(e) => e.fmt(f),
            Self::NotOverridable { rule } => write!(
                f,
                "rule {rule:?} takes no quota set at run time (give it quota_from, or \
                 overridable = true)"
            ),
            Self::Quota(e) => write!(f, "the quota does not fit the rule: {e}"),
        }
    }
}

impl std::error::Error for ControlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Store(e) => Some(e),
            Self::Quota(e) => Some(e),
            Self::UnknownRule { .. } | Self::NotOverridable { .. } => None,
        }
    }
}

impl From<StoreError> for ControlError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}
