//! [`Mode`]: what a rule does with a request over its limit.

use crate::error::{ConfigError, ConfigErrorKind};
#[cfg(doc)]
use crate::rules::Rule;

/// How a rule treats a request over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Deny it (429). The default.
    #[default]
    Enforce,
    /// Let it through, but count and log the would-be denial; headers still report the limit.
    /// For rolling out a new limit safely.
    Shadow,
    /// Queue it, leaky-bucket style: requests within the burst go at once; a request past it
    /// waits until its slot (the moment it would otherwise be told to retry at), so the excess
    /// leaves at a steady rate; one that would wait longer than `max_delay` is denied at once.
    /// A connection is never held longer than `max_delay`. With `burst = 1` every request is
    /// spaced by `period / limit`. Under a [limit on requests in flight](Rule::in_flight), a
    /// request that finds every slot taken waits for one, up to `max_delay`.
    Delay,
}

impl std::str::FromStr for Mode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enforce" => Ok(Mode::Enforce),
            "shadow" => Ok(Mode::Shadow),
            "delay" => Ok(Mode::Delay),
            other => Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                format!("unknown mode {other:?} (use enforce, shadow or delay)"),
            )),
        }
    }
}
