//! `LOG_FORMAT=json`: one JSON object a line, as the reference's logrus writes them
//! (`src/service_cmd/runner/runner.go`: `JSONFormatter` with `@timestamp` in RFC 3339 with
//! nanoseconds and `@message`): `{"@message":"…","@timestamp":"…","level":"warning"}`, keys
//! sorted as Go's JSON encoder sorts a map's, logrus's lowercase level names, and an event's
//! own fields beside them.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The logrus-shaped JSON line of each event.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogrusJson;

impl<S, N> FormatEvent<S, N> for LogrusJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields(BTreeMap::new());
        event.record(&mut fields);
        let mut line = fields.0;
        let message = line
            .remove("message")
            .unwrap_or(Value::String(String::new()));
        line.insert("@message".into(), message);
        line.insert(
            "@timestamp".into(),
            Value::String(rfc3339_nano(SystemTime::now())),
        );
        line.insert(
            "level".into(),
            Value::String(level(event.metadata().level()).into()),
        );
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// logrus's name of a level.
fn level(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "trace",
        Level::DEBUG => "debug",
        Level::INFO => "info",
        Level::WARN => "warning",
        Level::ERROR => "error",
    }
}

/// An event's fields as JSON values.
struct Fields(BTreeMap<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().into(), Value::String(value.into()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
}

/// `time` as Go's `time.RFC3339Nano` writes it in UTC: `2006-01-02T15:04:05.999999999Z`, the
/// fraction without its trailing zeros (and without its dot when whole).
fn rfc3339_nano(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    let mut text = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    let nanos = since.subsec_nanos();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text.push('Z');
    text
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn go_rfc3339_nano() {
        let at = |secs: u64, nanos: u32| UNIX_EPOCH + Duration::new(secs, nanos);
        assert_eq!(rfc3339_nano(at(0, 0)), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339_nano(at(1_700_000_000, 120_000_000)),
            "2023-11-14T22:13:20.12Z"
        );
        assert_eq!(
            rfc3339_nano(at(951_782_400, 1)),
            "2000-02-29T00:00:00.000000001Z"
        );
    }

    #[test]
    fn logrus_level_names() {
        assert_eq!(level(&Level::WARN), "warning");
        assert_eq!(level(&Level::ERROR), "error");
    }
}
