//! Quotas as text: `"100/min"`, `"5/10s"`, `"10/s; burst=20"`, both ways.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::Quota;
use crate::error::{ConfigError, ConfigErrorKind};

impl fmt::Display for Quota {
    /// Formats as the string form `FromStr` reads, e.g. `"10/1s; burst=20"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}/{}", self.limit, format_period(self.period))?;
        if let Some(b) = self.burst {
            write!(f, "; burst={b}")?;
        }
        f.write_str("\"")
    }
}

/// Formats a period in the largest unit that divides it exactly.
fn format_period(period: Duration) -> String {
    let us = period.as_micros();
    for (unit, size) in [
        ("day", 86_400_000_000u128),
        ("h", 3_600_000_000),
        ("min", 60_000_000),
        ("s", 1_000_000),
        ("ms", 1_000),
    ] {
        if us >= size && us.is_multiple_of(size) {
            return format!("{}{unit}", us / size);
        }
    }
    format!("{us}us")
}

impl FromStr for Quota {
    type Err = ConfigError;

    /// Parses `"<limit>/<period>[; burst=<n>]"`: `"100/min"`, `"5/10s"`, `"10/s; burst=20"`,
    /// `"1000/day"`, `"1/250ms"`. Period units: `us`, `ms`, `s`, `min` (or `m`), `h`, `day`
    /// (or `d`), with long forms (`second`, `minutes`, …) also accepted.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |why: &str| {
            ConfigError::with_kind(
                ConfigErrorKind::Quota,
                format!("invalid quota {s:?}: {why}"),
            )
        };
        let mut parts = s.split(';');
        let rate = parts.next().unwrap_or_default().trim();
        let (limit, period) = rate
            .split_once('/')
            .ok_or_else(|| fail("expected \"<limit>/<period>\", e.g. \"100/min\" or \"5/10s\""))?;
        let limit: u32 = limit
            .trim()
            .parse()
            .map_err(|_| fail("the limit must be a whole number from 1 to 4294967295"))?;
        let period = parse_period(period.trim()).map_err(|why| fail(&why))?;
        let mut quota = Quota {
            limit,
            period,
            burst: None,
        };
        for option in parts {
            let option = option.trim();
            if option.is_empty() {
                continue;
            }
            let (name, value) = option
                .split_once('=')
                .ok_or_else(|| fail("options look like \"; burst=20\""))?;
            match name.trim() {
                "burst" if quota.burst.is_some() => return Err(fail("burst is given twice")),
                "burst" => {
                    let burst = value
                        .trim()
                        .parse()
                        .map_err(|_| fail("burst must be a whole number from 1 to 4294967295"))?;
                    quota.burst = Some(burst);
                }
                other => {
                    return Err(fail(&format!(
                        "unknown option {other:?} (the only option is \"burst\")"
                    )))
                }
            }
        }
        quota.check().map_err(|e| {
            ConfigError::with_kind(
                ConfigErrorKind::Quota,
                format!("invalid quota {s:?}: {}", after_colon(&e)),
            )
        })?;
        Ok(quota)
    }
}

/// The reason part of a validation message (`"invalid quota …: <reason>"`).
fn after_colon(e: &ConfigError) -> &str {
    e.message()
        .split_once(": ")
        .map_or(e.message(), |(_, why)| why)
}

/// Parses a period such as `"s"`, `"10s"`, `"250ms"`, `"min"`, `"2 hours"`.
pub(crate) fn parse_period(s: &str) -> Result<Duration, String> {
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (count, unit) = s.split_at(digits);
    let count: u64 = if count.is_empty() {
        1
    } else {
        count
            .parse()
            .map_err(|_| format!("period count {count:?} is too large"))?
    };
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "period {s:?}: fractions are not allowed; use a whole number of a smaller unit \
             (e.g. \"1500ms\" rather than \"1.5s\")"
        ));
    }
    let unit_us: u64 = match unit.trim() {
        "us" | "µs" | "micro" | "micros" | "microsecond" | "microseconds" => 1,
        "ms" | "milli" | "millis" | "millisecond" | "milliseconds" => 1_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000,
        "d" | "day" | "days" => 86_400_000_000,
        "" => return Err("the period needs a unit: us, ms, s, min, h or day".into()),
        other => {
            return Err(format!(
                "unknown period unit {other:?} (use us, ms, s, min, h or day)"
            ))
        }
    };
    if count == 0 {
        return Err("the period must be longer than zero".into());
    }
    count
        .checked_mul(unit_us)
        .map(Duration::from_micros)
        .ok_or_else(|| "the period is too long (at most 365 days)".into())
}
