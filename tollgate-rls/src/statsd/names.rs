//! The statistics the process keeps, read back from the Prometheus recorder's text, under the
//! statsd names the reference sends: its `src/stats/prom/default_mapper.yaml` read the other
//! way, with the scopes of `src/stats/manager_impl.go` (`ratelimit.service…`) and
//! `src/metrics/metrics.go` (`ratelimit_server.<method>…`).

/// What one line of the Prometheus text is, for statsd.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stat {
    /// A counter's total so far.
    Counter(String, f64),
    /// The seconds a timer has recorded so far.
    TimerSum(String, f64),
    /// The number of times a timer has recorded.
    TimerCount(String, f64),
    /// A gauge's value now.
    Gauge(String, f64),
}

/// The statistics in `text` (the Prometheus exposition format as the recorder renders it) that
/// the reference sends to statsd; the library's own statistics (`tollgate_*`) are not among
/// them.
pub(crate) fn stats(text: &str) -> Vec<Stat> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(line)
        .filter_map(|s| stat(s.name, &s.labels, s.value))
        .map(|stat| match stat {
            Stat::Counter(name, v) => Stat::Counter(one_line(name), v),
            Stat::TimerSum(name, v) => Stat::TimerSum(one_line(name), v),
            Stat::TimerCount(name, v) => Stat::TimerCount(one_line(name), v),
            Stat::Gauge(name, v) => Stat::Gauge(one_line(name), v),
        })
        .collect()
}

/// `name` with what would end or split a statsd line (control characters, and `:` and `|`,
/// which the reference's sanitizing already replaces) made `_`: a value a client sent cannot
/// add a line of its own.
fn one_line(name: String) -> String {
    let bad = |c: char| c.is_control() || c == ':' || c == '|';
    match name.contains(bad) {
        false => name,
        true => name.chars().map(|c| if bad(c) { '_' } else { c }).collect(),
    }
}

/// One line of the Prometheus text.
struct Sample<'a> {
    name: &'a str,
    labels: Vec<(&'a str, String)>,
    value: f64,
}

/// `name{k="v",…} value` or `name value`, label values unescaped.
fn line(l: &str) -> Option<Sample<'_>> {
    let (name, mut rest) = match l.find(['{', ' ']) {
        Some(at) if l.as_bytes()[at] == b'{' => (&l[..at], &l[at + 1..]),
        Some(at) => (&l[..at], &l[at..]),
        None => return None,
    };
    let mut labels = Vec::new();
    if l.as_bytes().get(name.len()) == Some(&b'{') {
        loop {
            rest = rest.trim_start_matches(',');
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = rest.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (at, '"') => break at,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    (_, c) => value.push(c),
                }
            };
            labels.push((key, value));
            rest = &after[end + 1..];
        }
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// The reference's statsd name of one series, if it has one.
fn stat(name: &str, labels: &[(&str, String)], value: f64) -> Option<Stat> {
    if let Some(base) = name.strip_suffix("_sum") {
        let (statsd, Kind::Timer) = reference_name(base, labels)? else {
            return None;
        };
        return Some(Stat::TimerSum(statsd, value));
    }
    if let Some(base) = name.strip_suffix("_count") {
        let (statsd, Kind::Timer) = reference_name(base, labels)? else {
            return None;
        };
        return Some(Stat::TimerCount(statsd, value));
    }
    Some(match reference_name(name, labels)? {
        (statsd, Kind::Counter) => Stat::Counter(statsd, value),
        (statsd, Kind::Gauge) => Stat::Gauge(statsd, value),
        (_, Kind::Timer) => return None,
    })
}

/// What a statistic of the reference is to statsd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    /// Milliseconds per call (`|ms`); the series records seconds.
    Timer,
}

/// The reference's statsd name of the series `name{labels}` (as the reference's default
/// mapping names it on `/metrics`), and what it is; `None` for a series of tollgate's own.
pub(crate) fn reference_name(name: &str, labels: &[(&str, String)]) -> Option<(String, Kind)> {
    let label = |key: &str| {
        labels
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    };
    if let Some(kind) = name.strip_prefix("ratelimit_service_rate_limit_") {
        let name = match kind {
            // The domain is not kept (a client may send any number of them).
            "domain_not_found" => "ratelimit.service.rate_limit.domain_not_found".to_owned(),
            "total_hits" | "over_limit" | "near_limit" | "within_limit" | "shadow_mode" => {
                match (label("overflow"), label("domain"), label("key1")) {
                    (Some(_), _, _) => format!("ratelimit.service.rate_limit.overflow.{kind}"),
                    (None, Some(domain), Some(key1)) => match label("key2") {
                        Some(key2) => {
                            format!("ratelimit.service.rate_limit.{domain}.{key1}.{key2}.{kind}")
                        }
                        None => format!("ratelimit.service.rate_limit.{domain}.{key1}.{kind}"),
                    },
                    _ => return None,
                }
            }
            _ => return None,
        };
        return Some((name, Kind::Counter));
    }
    let method = || label("grpc_method");
    Some(match name {
        "ratelimit_service_should_rate_limit_error" => (
            format!(
                "ratelimit.service.call.should_rate_limit.{}",
                label("err_type")?
            ),
            Kind::Counter,
        ),
        "ratelimit_service_config_load_success" => (
            "ratelimit.service.config_load_success".into(),
            Kind::Counter,
        ),
        "ratelimit_service_config_load_error" => {
            ("ratelimit.service.config_load_error".into(), Kind::Counter)
        }
        "ratelimit_service_global_shadow_mode" => {
            ("ratelimit.service.global_shadow_mode".into(), Kind::Counter)
        }
        "ratelimit_redis_pool_cx_active" => ("ratelimit.redis_pool.cx_active".into(), Kind::Gauge),
        "ratelimit_service_total_requests" => (
            format!("ratelimit_server.{}.total_requests", method()?),
            Kind::Counter,
        ),
        "ratelimit_service_response_time_seconds" => (
            format!("ratelimit_server.{}.response_time", method()?),
            Kind::Timer,
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, value: f64) -> Stat {
        Stat::Counter(name.into(), value)
    }

    /// Each mapping of the reference's `src/stats/prom/default_mapper.yaml`, read backwards,
    /// on text as metrics-exporter-prometheus renders it.
    #[test]
    fn every_mapping_of_the_references_mapper_read_backwards() {
        let text = r#"# TYPE ratelimit_service_rate_limit_total_hits counter
ratelimit_service_rate_limit_total_hits{domain="edge",key1="user_a"} 3
ratelimit_service_rate_limit_near_limit{domain="edge",key1="a",key2="b_c"} 2
ratelimit_service_rate_limit_over_limit{overflow="true"} 40
ratelimit_service_rate_limit_within_limit{domain="d",key1="k"} 7
ratelimit_service_rate_limit_shadow_mode{domain="d",key1="k"} 1
ratelimit_service_rate_limit_domain_not_found 5
ratelimit_service_should_rate_limit_error{err_type="redis_error"} 4
ratelimit_service_config_load_success 1
ratelimit_service_config_load_error 2
ratelimit_service_global_shadow_mode 6
ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 9
ratelimit_redis_pool_cx_active 1

# TYPE ratelimit_service_response_time_seconds summary
ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit",quantile="0.5"} 0.001
ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"} 0.25
ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 9
tollgate_fallback_decisions_total 3
"#;
        assert_eq!(
            stats(text),
            [
                counter("ratelimit.service.rate_limit.edge.user_a.total_hits", 3.0),
                counter("ratelimit.service.rate_limit.edge.a.b_c.near_limit", 2.0),
                counter("ratelimit.service.rate_limit.overflow.over_limit", 40.0),
                counter("ratelimit.service.rate_limit.d.k.within_limit", 7.0),
                counter("ratelimit.service.rate_limit.d.k.shadow_mode", 1.0),
                counter("ratelimit.service.rate_limit.domain_not_found", 5.0),
                counter("ratelimit.service.call.should_rate_limit.redis_error", 4.0),
                counter("ratelimit.service.config_load_success", 1.0),
                counter("ratelimit.service.config_load_error", 2.0),
                counter("ratelimit.service.global_shadow_mode", 6.0),
                counter("ratelimit_server.ShouldRateLimit.total_requests", 9.0),
                Stat::Gauge("ratelimit.redis_pool.cx_active".into(), 1.0),
                Stat::TimerSum(
                    "ratelimit_server.ShouldRateLimit.response_time".into(),
                    0.25
                ),
                Stat::TimerCount("ratelimit_server.ShouldRateLimit.response_time".into(), 9.0),
            ]
        );
    }

    /// Label values come back as they were recorded, escapes undone.
    #[test]
    fn escaped_label_values_are_read_back() {
        let text =
            "ratelimit_service_rate_limit_total_hits{domain=\"a\\\"b\\\\c\",key1=\"x,y}\"} 2\n";
        assert_eq!(
            stats(text),
            [counter(
                "ratelimit.service.rate_limit.a\"b\\c.x,y}.total_hits",
                2.0
            )]
        );
        assert_eq!(
            stats("ratelimit_service_total_requests{grpc_method=\"M\"\n"),
            []
        );
        // A value that would end the line and start another stays in one name.
        let forged =
            "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"k_x\\nevil:9|c\"} 1\n";
        assert_eq!(
            stats(forged),
            [counter(
                "ratelimit.service.rate_limit.d.k_x_evil_9_c.total_hits",
                1.0
            )]
        );
    }
}
