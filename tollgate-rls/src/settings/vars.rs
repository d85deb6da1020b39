//! Reading variables: where they come from (the environment, or a map in tests) and the forms
//! the reference's values take (Go's booleans and durations, ports).

use std::time::Duration;

use super::error::SettingsError;

/// The variables, looked up by name.
#[derive(Clone, Copy)]
pub(crate) struct Vars<'a> {
    lookup: &'a dyn Fn(&str) -> Option<String>,
}

impl<'a> Vars<'a> {
    pub(crate) fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Self { lookup }
    }

    /// `name`'s value as set, empty included.
    pub(crate) fn var(&self, name: &str) -> Option<String> {
        (self.lookup)(name)
    }

    /// `name`'s value, or `default` when it is unset.
    pub(crate) fn get(&self, name: &str, default: &str) -> String {
        self.var(name).unwrap_or_else(|| default.to_owned())
    }

    /// `name`'s value when it is set to something other than blanks.
    pub(crate) fn set(&self, name: &str) -> Option<String> {
        self.var(name).filter(|v| !v.trim().is_empty())
    }

    /// `name` read by `parse` (`None`: not a value it takes, and the error says `expected`), or
    /// `default` when it is unset.
    pub(crate) fn parsed<T>(
        &self,
        name: &str,
        default: T,
        parse: impl FnOnce(&str) -> Option<T>,
        expected: &str,
    ) -> Result<T, SettingsError> {
        match self.var(name) {
            None => Ok(default),
            Some(v) => parse(&v).ok_or_else(|| SettingsError::invalid(name, v, expected)),
        }
    }

    /// A boolean as Go's `strconv.ParseBool` reads it.
    pub(crate) fn flag(&self, name: &str, default: bool) -> Result<bool, SettingsError> {
        self.parsed(name, default, parse_bool, "expected true or false")
    }

    /// A TCP port, 0 (any free port) included.
    pub(crate) fn port(&self, name: &str, default: u16) -> Result<u16, SettingsError> {
        let parse = |v: &str| v.parse::<u16>().ok();
        self.parsed(name, default, parse, "expected a port from 0 to 65535")
    }

    /// A Go duration (`50ms`, `1m30s`).
    pub(crate) fn duration(
        &self,
        name: &str,
        default: Duration,
    ) -> Result<Duration, SettingsError> {
        let expected = "expected a duration such as 50ms, 1s or 1h";
        self.parsed(name, default, parse_duration, expected)
    }
}

/// Go's `strconv.ParseBool`, which the reference's settings use.
pub(crate) fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A Go duration (`50ms`, `1s`, `1m30s`, `1.5s`), as the reference's settings take them.
pub(crate) fn parse_duration(v: &str) -> Option<Duration> {
    let mut rest = v.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, tail) = rest.split_at(digits);
        let number: f64 = number.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * seconds;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("50ms"), Some(Duration::from_millis(50)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h3m"), Some(Duration::from_secs(7380)));
        assert_eq!(parse_duration("10"), None);
        assert_eq!(parse_duration("5 parsecs"), None);
    }

    #[test]
    fn go_booleans() {
        assert_eq!(parse_bool("T"), Some(true));
        assert_eq!(parse_bool("False"), Some(false));
        assert_eq!(parse_bool("yes"), None);
    }
}
