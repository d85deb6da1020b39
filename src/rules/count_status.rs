//! [`StatusMatch`]: the response statuses a rule counts (`count_status`), e.g. only failed
//! logins.

use std::fmt;
use std::str::FromStr;

use http::StatusCode;

use crate::error::{ConfigError, ConfigErrorKind};

/// A response status that a rule with [`count_status`](crate::rules::Rule::count_status)
/// counts: one code (`401`) or a class (`"4xx"`).
///
/// ```
/// use tollgate::rules::StatusMatch;
///
/// assert_eq!(StatusMatch::from(401), StatusMatch::Code(401));
/// assert_eq!("5xx".parse::<StatusMatch>()?, StatusMatch::class(5));
/// assert_eq!("403".parse::<StatusMatch>()?, StatusMatch::Code(403));
/// assert!("6xx".parse::<StatusMatch>().is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatusMatch {
    /// One status code, 100 to 599.
    Code(u16),
    /// Every status whose first digit is this, 1 to 5 (`4` is `4xx`).
    Class(u8),
}

impl StatusMatch {
    /// The class whose statuses start with `first_digit` (`StatusMatch::class(4)` is `4xx`).
    pub fn class(first_digit: u8) -> Self {
        Self::Class(first_digit)
    }

    /// Whether `status` is this code, or in this class.
    pub fn matches(&self, status: StatusCode) -> bool {
        match *self {
            Self::Code(code) => status.as_u16() == code,
            Self::Class(class) => status.as_u16() / 100 == u16::from(class),
        }
    }

    /// Checks the code or class is one HTTP has.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let valid = match *self {
            Self::Code(code) => (100..=599).contains(&code),
            Self::Class(class) => (1..=5).contains(&class),
        };
        if valid {
            Ok(())
        } else {
            Err(format!("{self} is not an HTTP status ({ALLOWED})"))
        }
    }
}

/// What `count_status` takes, for error messages.
pub(crate) const ALLOWED: &str =
    "use codes from 100 to 599 and classes \"1xx\" to \"5xx\", e.g. [401, 403] or \"4xx\"";

impl From<u16> for StatusMatch {
    fn from(code: u16) -> Self {
        Self::Code(code)
    }
}

impl fmt::Display for StatusMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code(code) => write!(f, "{code}"),
            Self::Class(class) => write!(f, "\"{class}xx\""),
        }
    }
}

impl FromStr for StatusMatch {
    type Err = ConfigError;

    /// A code (`"401"`) or a class (`"4xx"`, `"4XX"`), checked.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let parsed = match text.to_ascii_lowercase().strip_suffix("xx") {
            Some(digit) if digit.len() == 1 => digit.parse().ok().map(Self::Class),
            Some(_) => None,
            None => text.parse().ok().map(Self::Code),
        };
        let fail = |why: String| ConfigError::with_kind(ConfigErrorKind::Rule, why);
        let parsed = parsed.ok_or_else(|| {
            fail(format!(
                "count_status {text:?} is not a status code or class ({ALLOWED})"
            ))
        })?;
        parsed
            .validate()
            .map_err(|why| fail(format!("count_status: {why}")))?;
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_classes_match_their_statuses() {
        let unauthorized = StatusCode::UNAUTHORIZED;
        assert!(StatusMatch::Code(401).matches(unauthorized));
        assert!(!StatusMatch::Code(403).matches(unauthorized));
        assert!(StatusMatch::class(4).matches(unauthorized));
        assert!(!StatusMatch::class(4).matches(StatusCode::OK));
        assert!(StatusMatch::class(5).matches(StatusCode::BAD_GATEWAY));
        assert_eq!("4XX".parse::<StatusMatch>().unwrap(), StatusMatch::class(4));
    }

    #[test]
    fn what_http_has_not_is_refused() {
        for bad in ["99", "600", "6xx", "0xx", "44xx", "x", "", "-1"] {
            let e = bad.parse::<StatusMatch>().unwrap_err();
            assert!(e.message().contains("100 to 599"), "{bad}: {e}");
        }
        assert_eq!(
            StatusMatch::Code(99).validate().unwrap_err(),
            format!("99 is not an HTTP status ({ALLOWED})")
        );
        assert!(StatusMatch::Class(0).validate().is_err());
        assert!(StatusMatch::Code(599).validate().is_ok());
    }
}
