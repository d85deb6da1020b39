//! The statsd push (`USE_STATSD`, `USE_DOG_STATSD`): every `STATS_FLUSH_INTERVAL` a thread of
//! its own reads the counters the process already keeps (the Prometheus recorder's, rendered)
//! and sends how much each grew since the last flush, under the reference's statsd names
//! (`names.rs`), through a cadence client (`sink.rs`). gostats, the reference's statistics
//! library, sums its counters the same way and sends them at each flush; a request here does no
//! work for statsd at all.
//!
//! Timers differ: gostats sends each call's time; this push sends, per flush, the calls' mean
//! time with the sample rate `1/calls`, so that statsd counts every call and sums their time.

mod mogrifier;
mod names;
mod options;
mod sink;

use std::collections::HashMap;

use cadence::prelude::*;
use cadence::{Metric, MetricBuilder, StatsdClient};
use metrics_exporter_prometheus::PrometheusHandle;

use names::Stat;

pub(crate) use mogrifier::Mogrifier;
pub(crate) use names::{reference_name, Kind as StatKind};
pub(crate) use options::{Protocol, Statsd};

/// Starts the push: a thread that flushes every `settings.flush_interval` for the life of the
/// process.
pub(crate) fn spawn(settings: Statsd, metrics: PrometheusHandle) -> std::io::Result<()> {
    let every = settings.flush_interval;
    let mut push = Push::new(settings);
    std::thread::Builder::new()
        .name("tollgate-rls-statsd".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            push.flush(&metrics.render());
        })?;
    Ok(())
}

/// What the push has sent so far, to send only what grew since.
struct Push {
    settings: Statsd,
    client: Option<StatsdClient>,
    counters: HashMap<String, f64>,
    /// Per timer: the seconds and the calls recorded so far.
    timers: HashMap<String, (f64, f64)>,
    /// Whether the last flush failed, so that an outage is logged once.
    failing: bool,
}

/// One line to send.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    /// A counter's growth.
    Count(String, u64),
    /// `calls` calls of `millis` milliseconds on average.
    Time {
        name: String,
        millis: u64,
        calls: u64,
    },
    /// A gauge's value now.
    Gauge(String, u64),
}

impl Push {
    fn new(settings: Statsd) -> Self {
        Self {
            settings,
            client: None,
            counters: HashMap::new(),
            timers: HashMap::new(),
            failing: false,
        }
    }

    /// Sends what grew since the last flush. What cannot be sent is lost, as gostats loses it:
    /// the next flush sends only its own growth.
    fn flush(&mut self, rendered: &str) {
        let lines = self.lines(rendered);
        if lines.is_empty() {
            // Nothing to send says nothing of whether statsd is reachable.
            return;
        }
        if self.client.is_none() {
            match sink::client(&self.settings) {
                Ok(client) => self.client = Some(client),
                Err(e) => return self.report(Err(e.to_string())),
            }
        }
        let Some(client) = &self.client else { return };
        let mut outcome = Ok(());
        for line in &lines {
            if let Err(e) = self.send(client, line) {
                outcome = Err(e.to_string());
            }
        }
        if let Err(e) = client.flush() {
            outcome = Err(e.to_string());
        }
        self.report(outcome);
    }

    /// The lines for the statistics in `rendered`, against what was seen at the last flush.
    fn lines(&mut self, rendered: &str) -> Vec<Line> {
        let mut counters: HashMap<String, f64> = HashMap::new();
        let mut timers: HashMap<String, (f64, f64)> = HashMap::new();
        let mut lines = Vec::new();
        for stat in names::stats(rendered) {
            match stat {
                Stat::Counter(name, v) => *counters.entry(name).or_default() += v,
                Stat::TimerSum(name, v) => timers.entry(name).or_default().0 += v,
                Stat::TimerCount(name, v) => timers.entry(name).or_default().1 += v,
                Stat::Gauge(name, v) => lines.push(Line::Gauge(name, v.max(0.0) as u64)),
            }
        }
        for (name, now) in &counters {
            let grown = now - self.counters.get(name).copied().unwrap_or(0.0);
            if grown >= 1.0 {
                lines.push(Line::Count(name.clone(), grown as u64));
            }
        }
        for (name, (seconds, calls)) in &timers {
            let (seconds_before, calls_before) = self.timers.get(name).copied().unwrap_or_default();
            let calls = calls - calls_before;
            if calls >= 1.0 {
                let millis = ((seconds - seconds_before) * 1000.0 / calls)
                    .round()
                    .max(0.0);
                lines.push(Line::Time {
                    name: name.clone(),
                    millis: millis as u64,
                    calls: calls as u64,
                });
            }
        }
        self.counters = counters;
        self.timers = timers;
        lines.sort_by(|a, b| line_name(a).cmp(line_name(b)));
        lines
    }

    /// Sends one line, with `EXTRA_TAGS` as gostats attaches them to every scope the
    /// reference names (`ratelimit`, `ratelimit_server`): `.__name=value` at the end of the
    /// name for statsd, DogStatsD tags (after the mogrifiers) for DogStatsD.
    fn send(&self, client: &StatsdClient, line: &Line) -> cadence::MetricResult<()> {
        let s = &self.settings;
        let (name, mogrified) = match s.dog {
            true => mogrifier::mogrify(&s.mogrifiers, line_name(line)),
            false => {
                let mut name = line_name(line).to_owned();
                for (k, v) in &s.extra_tags {
                    name.push_str(&format!(".__{k}={v}"));
                }
                (name, Vec::new())
            }
        };
        let tagged = Tags {
            extra: match s.dog {
                true => &s.extra_tags,
                false => &[],
            },
            mogrified: &mogrified,
        };
        match line {
            Line::Count(_, n) => tagged.send(client.count_with_tags(&name, *n)),
            Line::Gauge(_, v) => tagged.send(client.gauge_with_tags(&name, *v)),
            Line::Time { millis, calls, .. } => {
                let mut time = client.time_with_tags(&name, *millis);
                if *calls > 1 {
                    time = time.with_sampling_rate(1.0 / *calls as f64);
                }
                tagged.send(time)
            }
        }
    }

    /// Logs a failure once until a flush succeeds again.
    fn report(&mut self, outcome: Result<(), String>) {
        match outcome {
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!(
                    "statistics reach statsd at {}:{} again",
                    self.settings.host,
                    self.settings.port
                );
            }
            Ok(()) => {}
            Err(e) if !self.failing => {
                self.failing = true;
                tracing::warn!(
                    "statistics cannot reach statsd at {}:{}: {e} (lost until it can; \
                     USE_STATSD=false turns the push off)",
                    self.settings.host,
                    self.settings.port
                );
            }
            Err(_) => {}
        }
    }
}

/// The DogStatsD tags of one line: `EXTRA_TAGS`, then a mogrifier's.
struct Tags<'a> {
    extra: &'a [(String, String)],
    mogrified: &'a [String],
}

impl<'a> Tags<'a> {
    fn send<T>(&self, mut builder: MetricBuilder<'a, '_, T>) -> cadence::MetricResult<()>
    where
        T: Metric + From<String>,
    {
        for (k, v) in self.extra {
            builder = builder.with_tag(k, v);
        }
        for tag in self.mogrified {
            builder = builder.with_tag_value(tag);
        }
        builder.try_send().map(|_| ())
    }
}

fn line_name(line: &Line) -> &str {
    match line {
        Line::Count(name, _) | Line::Gauge(name, _) | Line::Time { name, .. } => name,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn push() -> Push {
        let settings = Statsd {
            host: "127.0.0.1".into(),
            port: 9,
            protocol: Protocol::Udp,
            dog: false,
            extra_tags: Vec::new(),
            flush_interval: Duration::from_secs(10),
            mogrifiers: Vec::new(),
        };
        Push::new(settings)
    }

    /// gostats's `Flush` (lyft/gostats `stats.go`): a counter sends what it grew by since the
    /// last flush, and nothing when it did not grow; gauges their value at each flush.
    #[test]
    fn each_flush_sends_the_growth_since_the_last() {
        let mut p = push();
        let text = |hits: u32, calls: u32, seconds: f64| {
            format!(
                "ratelimit_service_rate_limit_total_hits{{domain=\"d\",key1=\"k\"}} {hits}\n\
                 ratelimit_service_response_time_seconds_sum{{grpc_method=\"M\"}} {seconds}\n\
                 ratelimit_service_response_time_seconds_count{{grpc_method=\"M\"}} {calls}\n\
                 ratelimit_redis_pool_cx_active 3\n"
            )
        };
        let gauge = Line::Gauge("ratelimit.redis_pool.cx_active".into(), 3);
        let count = |n| Line::Count("ratelimit.service.rate_limit.d.k.total_hits".into(), n);
        let time = |millis, calls| Line::Time {
            name: "ratelimit_server.M.response_time".into(),
            millis,
            calls,
        };
        assert_eq!(
            p.lines(&text(5, 4, 0.010)),
            [gauge.clone(), count(5), time(3, 4)]
        );
        assert_eq!(p.lines(&text(5, 4, 0.010)), std::slice::from_ref(&gauge));
        assert_eq!(p.lines(&text(7, 5, 0.012)), [gauge, count(2), time(2, 1)]);
    }
}
