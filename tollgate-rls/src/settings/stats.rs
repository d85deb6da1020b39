//! Where statistics go and how many there may be, as the reference's `src/settings/settings.go`
//! and the sink switch of its `src/service_cmd/runner/runner.go` read them: `DISABLE_STATS` (no
//! sink), else exactly one of `USE_STATSD` (on unless set false; its variables in `statsd.rs`),
//! `USE_DOG_STATSD` and `USE_PROMETHEUS` (with `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`,
//! `PROMETHEUS_MAPPER_YAML` and `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`);
//! `NEAR_LIMIT_RATIO`, and tollgate's `STATS_MAX_SERIES`.

use super::error::SettingsError;
use super::statsd;
use super::vars::Vars;
use crate::mapper::{self, Mapper};
use crate::statsd::Statsd;

/// The statistics sinks the variables ask for (`HOST:PORT/metrics` is served whatever they
/// say), and what the statistics count.
#[derive(Debug, Clone)]
pub(crate) struct Stats {
    /// The statsd push, with `USE_STATSD` or `USE_DOG_STATSD`.
    pub(crate) statsd: Option<Statsd>,
    /// With `USE_PROMETHEUS`: where the metrics are served too.
    pub(crate) prometheus: Option<Prometheus>,
    /// `STATS_MAX_SERIES` (ours): how many statistics series request values may make.
    pub(crate) max_series: usize,
    /// `NEAR_LIMIT_RATIO`: hits past this share of a limit count as near it.
    pub(crate) near_limit_ratio: f32,
}

/// `PROMETHEUS_ADDR` (Go's form, `:9090` for every interface) and `PROMETHEUS_PATH`; and the
/// mapping of the reference's statistics to series, when it is not the default one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prometheus {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) path: String,
    /// The mapping's YAML: the file `PROMETHEUS_MAPPER_YAML` names, or with
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` the default one without the response
    /// time's scale; `None`: the default mapping.
    pub(crate) mapping: Option<String>,
}

/// The statistics `vars` ask for.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Stats, SettingsError> {
    let max_series = vars.parsed(
        "STATS_MAX_SERIES",
        1_000,
        |v| v.parse::<usize>().ok(),
        "expected a number of series such as 1000",
    )?;
    let near_limit_ratio = vars.parsed(
        "NEAR_LIMIT_RATIO",
        0.8,
        |v| v.parse::<f32>().ok().filter(|r| *r >= 0.0),
        "expected a share of the limit such as 0.8",
    )?;
    let (statsd, prometheus) = sinks(vars)?;
    Ok(Stats {
        statsd,
        prometheus,
        max_series,
        near_limit_ratio,
    })
}

/// The one sink the variables choose, if any.
fn sinks(vars: &Vars<'_>) -> Result<(Option<Statsd>, Option<Prometheus>), SettingsError> {
    let disabled = vars.flag("DISABLE_STATS", false)?;
    let (plain, dog, prometheus) = (
        vars.flag("USE_STATSD", true)?,
        vars.flag("USE_DOG_STATSD", false)?,
        vars.flag("USE_PROMETHEUS", false)?,
    );
    if disabled {
        return Ok((None, None));
    }
    let on: Vec<&str> = [
        ("USE_DOG_STATSD", dog),
        ("USE_STATSD", plain),
        ("USE_PROMETHEUS", prometheus),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if let [first, others @ ..] = on.as_slice() {
        if !others.is_empty() {
            // runner.go: "unable to use more than one stats sink at the same time".
            let others: Vec<String> = others.iter().map(|name| format!("{name}=true")).collect();
            return Err(SettingsError::conflict_at(
                *first,
                "true",
                format!(
                    "and {}: one statistics sink at a time, as the reference takes them \
                     (USE_STATSD is true unless set to false)",
                    others.join(" and ")
                ),
            ));
        }
    }
    if prometheus {
        return Ok((None, Some(prometheus_address(vars)?)));
    }
    if !plain && !dog {
        return Ok((None, None));
    }
    Ok((Some(statsd::read(vars, dog)?), None))
}

/// Where the metrics are served with `USE_PROMETHEUS`.
fn prometheus_address(vars: &Vars<'_>) -> Result<Prometheus, SettingsError> {
    let given = vars.get("PROMETHEUS_ADDR", ":9090");
    let address = match given.starts_with(':') {
        true => format!("0.0.0.0{given}"),
        false => given.clone(),
    };
    let host_port = (address.rsplit_once(':'))
        .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)));
    let Some((host, port)) = host_port else {
        return Err(SettingsError::invalid(
            "PROMETHEUS_ADDR",
            given,
            "expected host:port",
        ));
    };
    let path = vars.get("PROMETHEUS_PATH", "/metrics");
    if !path.starts_with('/') {
        let expected = "expected a path such as /metrics";
        return Err(SettingsError::invalid("PROMETHEUS_PATH", path, expected));
    }
    Ok(Prometheus {
        host,
        port,
        path,
        mapping: mapping(vars)?,
    })
}

/// The mapping the reference's Prometheus sink reads (`src/stats/prom/prometheus_sink.go`):
/// the file `PROMETHEUS_MAPPER_YAML` names, else the default one, without its response time's
/// `scale` with `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` (`mapperConfig`). A file that
/// cannot be read or is not a mapping stops the start (the reference would serve every series
/// unmapped).
fn mapping(vars: &Vars<'_>) -> Result<Option<String>, SettingsError> {
    let milliseconds = vars.flag("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)?;
    let Some(path) = vars.set("PROMETHEUS_MAPPER_YAML") else {
        return Ok(milliseconds.then(mapper::default_mapping_in_milliseconds));
    };
    let yaml = std::fs::read_to_string(&path).map_err(|e| {
        let why = format!("cannot read it: {e}");
        SettingsError::invalid("PROMETHEUS_MAPPER_YAML", &path, why)
    })?;
    if let Err(e) = Mapper::from_yaml(&yaml) {
        let why = format!("not a statsd_exporter mapping: {e}");
        return Err(SettingsError::invalid("PROMETHEUS_MAPPER_YAML", path, why));
    }
    Ok(Some(yaml))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Stats, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    fn every_interface(port: u16) -> Option<Prometheus> {
        Some(Prometheus {
            host: "0.0.0.0".into(),
            port,
            path: "/metrics".into(),
            mapping: None,
        })
    }

    /// The reference's defaults (`src/settings/settings.go`, lines 85-97): statsd on.
    #[test]
    fn statsd_is_on_by_default() {
        let s = read_from(&[]).unwrap();
        assert!(s.statsd.is_some() && s.prometheus.is_none());
        assert_eq!((s.max_series, s.near_limit_ratio), (1_000, 0.8));
        for off in [[("USE_STATSD", "false")], [("DISABLE_STATS", "true")]] {
            let s = read_from(&off).unwrap();
            assert!(s.statsd.is_none() && s.prometheus.is_none());
        }
        // DISABLE_STATS wins over everything, as runner.go's first case.
        let s = read_from(&[("DISABLE_STATS", "true"), ("USE_PROMETHEUS", "true")]).unwrap();
        assert!(s.statsd.is_none() && s.prometheus.is_none());
    }

    /// runner.go, lines 49-80: more than one of USE_DOG_STATSD, USE_STATSD and USE_PROMETHEUS
    /// stops the start.
    #[test]
    fn one_sink_at_a_time() {
        let e = read_from(&[("USE_PROMETHEUS", "true")]).unwrap_err();
        assert!(
            e.starts_with("USE_STATSD=true and USE_PROMETHEUS=true: one statistics sink"),
            "{e}"
        );
        let e = read_from(&[("USE_DOG_STATSD", "true")]).unwrap_err();
        assert!(e.starts_with("USE_DOG_STATSD=true and USE_STATSD=true:"));
        let all = [("USE_DOG_STATSD", "true"), ("USE_PROMETHEUS", "true")];
        let e = read_from(&all).unwrap_err();
        assert!(
            e.starts_with("USE_DOG_STATSD=true and USE_STATSD=true and USE_PROMETHEUS=true:"),
            "{e}"
        );
        let prom = read_from(&[("USE_STATSD", "false"), ("USE_PROMETHEUS", "true")]).unwrap();
        assert_eq!(prom.prometheus, every_interface(9090));
        assert!(prom.statsd.is_none());
        let dog = read_from(&[("USE_STATSD", "false"), ("USE_DOG_STATSD", "true")]).unwrap();
        assert!(dog.statsd.unwrap().dog);
    }

    #[test]
    fn prometheus_where_the_variables_say() {
        let on = [("USE_STATSD", "false"), ("USE_PROMETHEUS", "true")];
        let with = |extra: (&'static str, &'static str)| {
            let mut vars = on.to_vec();
            vars.push(extra);
            read_from(&vars).map(|s| s.prometheus)
        };
        assert_eq!(with(("PROMETHEUS_ADDR", ":1")), Ok(every_interface(1)));
        let named = with(("PROMETHEUS_ADDR", "[::1]:9102")).unwrap().unwrap();
        assert_eq!((named.host.as_str(), named.port), ("[::1]", 9102));
        assert_eq!(
            with(("PROMETHEUS_ADDR", "metrics")).unwrap_err(),
            "PROMETHEUS_ADDR=\"metrics\": expected host:port"
        );
        assert!(with(("PROMETHEUS_PATH", "metrics"))
            .unwrap_err()
            .starts_with("PROMETHEUS_PATH="));
        // Not used, not read.
        let off = read_from(&[("PROMETHEUS_ADDR", "nonsense")]).unwrap();
        assert_eq!(off.prometheus, None);
        let ms = with(("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"));
        let ms = ms.unwrap().unwrap().mapping.unwrap();
        assert!(ms.contains("ratelimit_service_response_time_seconds") && !ms.contains("scale"));
        let e = with(("PROMETHEUS_MAPPER_YAML", "/nonexistent/mapper.yaml")).unwrap_err();
        assert!(e.starts_with("PROMETHEUS_MAPPER_YAML=\"/nonexistent/mapper.yaml\": cannot read"));
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (name, v) in [
            ("STATS_MAX_SERIES", "lots"),
            ("NEAR_LIMIT_RATIO", "most"),
            ("NEAR_LIMIT_RATIO", "-1"),
            ("USE_STATSD", "yes please"),
            ("DISABLE_STATS", "sure"),
        ] {
            let e = read_from(&[(name, v)]).unwrap_err();
            assert!(e.starts_with(&format!("{name}=")), "{e}");
        }
        let s = read_from(&[("NEAR_LIMIT_RATIO", "0.5"), ("STATS_MAX_SERIES", "20")]);
        let s = s.unwrap();
        assert_eq!((s.max_series, s.near_limit_ratio), (20, 0.5));
    }
}
