//! What stops the start (exit status 2): a variable, and what is wrong with it.

use std::fmt;

/// A setting the server cannot start with. Its message starts with the variable's name, as an
/// operator greps for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettingsError {
    /// The variable at fault; of two that do not go together, the first.
    pub(crate) name: String,
    /// What is wrong with it.
    pub(crate) problem: Problem,
}

/// What is wrong with a variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A value the variable does not take: `NAME="value": expected …`.
    Invalid { value: String, expected: String },
    /// A value of the right form that does not work (a file that cannot be read, a server that
    /// cannot be found): `NAME: why`.
    Unusable(String),
    /// The variable is set where it cannot be, without one it needs, or against another:
    /// `NAME is set: …`, `NAME=true needs OTHER`, `NAME and OTHER are both set: …`. `value` is
    /// the one it has, when that matters; `rest` goes on after the name.
    Conflict { value: Option<String>, rest: String },
}

impl SettingsError {
    /// `name` holds `value`, which is not one it takes.
    pub(crate) fn invalid(
        name: impl Into<String>,
        value: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        let (value, expected) = (value.into(), expected.into());
        Self::of(name, Problem::Invalid { value, expected })
    }

    /// `name`'s value does not work, because of `why`.
    pub(crate) fn unusable(name: impl Into<String>, why: impl Into<String>) -> Self {
        Self::of(name, Problem::Unusable(why.into()))
    }

    /// `name` does not go with the rest of the settings; `rest` says why, after the name.
    pub(crate) fn conflict(name: impl Into<String>, rest: impl Into<String>) -> Self {
        let rest = rest.into();
        Self::of(name, Problem::Conflict { value: None, rest })
    }

    /// `name`, set to `value`, does not go with the rest of the settings; `rest` says why.
    pub(crate) fn conflict_at(
        name: impl Into<String>,
        value: impl Into<String>,
        rest: impl Into<String>,
    ) -> Self {
        let (value, rest) = (Some(value.into()), rest.into());
        Self::of(name, Problem::Conflict { value, rest })
    }

    fn of(name: impl Into<String>, problem: Problem) -> Self {
        Self {
            name: name.into(),
            problem,
        }
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.name;
        match &self.problem {
            Problem::Invalid { value, expected } => write!(f, "{name}={value:?}: {expected}"),
            Problem::Unusable(why) => write!(f, "{name}: {why}"),
            Problem::Conflict { value: None, rest } => write!(f, "{name} {rest}"),
            Problem::Conflict {
                value: Some(value),
                rest,
            } => write!(f, "{name}={value} {rest}"),
        }
    }
}

impl std::error::Error for SettingsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_the_variable() {
        assert_eq!(
            SettingsError::invalid("PORT", "http", "expected a port").to_string(),
            "PORT=\"http\": expected a port"
        );
        assert_eq!(
            SettingsError::unusable("MEMCACHE_SRV", "no server").to_string(),
            "MEMCACHE_SRV: no server"
        );
        assert_eq!(
            SettingsError::conflict("A", "and B are both set: set one").to_string(),
            "A and B are both set: set one"
        );
        assert_eq!(
            SettingsError::conflict_at("A", "true", "needs B").to_string(),
            "A=true needs B"
        );
    }
}
