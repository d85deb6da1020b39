//! Where statistics go, as the reference's `src/settings/settings.go` and the sink switch of its
//! `src/service_cmd/runner/runner.go` read them: `DISABLE_STATS` (no sink), else exactly one of
//! `USE_STATSD` (on unless set false), `USE_DOG_STATSD` and `USE_PROMETHEUS`; for statsd
//! `STATSD_HOST`, `STATSD_PORT`, `STATSD_PROTOCOL` (read by the reference's gostats), `EXTRA_TAGS`
//! and `STATS_FLUSH_INTERVAL`; for DogStatsD also `USE_DOG_STATSD_MOGRIFIERS`.

use std::time::Duration;

use super::{parse_bool, parse_duration};
use crate::statsd::Mogrifier;

/// The statistics sinks the variables ask for (`HOST:PORT/metrics` is served whatever they say).
#[derive(Debug, Clone, Default)]
pub(crate) struct Sinks {
    /// The statsd push, with `USE_STATSD` or `USE_DOG_STATSD`.
    pub(crate) statsd: Option<Statsd>,
    /// With `USE_PROMETHEUS`: `PROMETHEUS_ADDR` (Go's form, `:9090` for every interface) and
    /// `PROMETHEUS_PATH`, where the metrics are served too.
    pub(crate) prometheus: Option<(String, String)>,
}

/// Where and how statistics are pushed.
#[derive(Debug, Clone)]
pub(crate) struct Statsd {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// gostats's `STATSD_PROTOCOL`: TCP unless `udp`; DogStatsD is always UDP.
    pub(crate) protocol: Protocol,
    /// `USE_DOG_STATSD`: `EXTRA_TAGS` as DogStatsD tags (`|#k:v`) rather than name parts.
    pub(crate) dog: bool,
    /// `EXTRA_TAGS` (`k1:v1,k2:v2`), sorted by name as gostats sorts them, empty ones left out.
    pub(crate) extra_tags: Vec<(String, String)>,
    /// `STATS_FLUSH_INTERVAL`: how often the counters' growth is sent.
    pub(crate) flush_interval: Duration,
    /// DogStatsD's `USE_DOG_STATSD_MOGRIFIERS`, in their order.
    pub(crate) mogrifiers: Vec<Mogrifier>,
}

/// How statsd lines travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Tcp,
    Udp,
}

/// The sinks `var` asks for, or an error naming the variable.
pub(crate) fn read(var: &dyn Fn(&str) -> Option<String>) -> Result<Sinks, String> {
    let flag = |name: &str, default: bool| match var(name) {
        None => Ok(default),
        Some(v) => parse_bool(&v).ok_or_else(|| format!("{name}={v:?}: expected true or false")),
    };
    let disabled = flag("DISABLE_STATS", false)?;
    let (plain, dog, prometheus) = (
        flag("USE_STATSD", true)?,
        flag("USE_DOG_STATSD", false)?,
        flag("USE_PROMETHEUS", false)?,
    );
    if disabled {
        return Ok(Sinks::default());
    }
    let on: Vec<&str> = [
        ("USE_DOG_STATSD", dog),
        ("USE_STATSD", plain),
        ("USE_PROMETHEUS", prometheus),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if on.len() > 1 {
        // runner.go: "unable to use more than one stats sink at the same time".
        return Err(format!(
            "{}: one statistics sink at a time, as the reference takes them (USE_STATSD is \
             true unless set to false)",
            on.iter()
                .map(|name| format!("{name}=true"))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    if prometheus {
        let addr = var("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let addr = match addr.starts_with(':') {
            true => format!("0.0.0.0{addr}"),
            false => addr,
        };
        let path = var("PROMETHEUS_PATH").unwrap_or_else(|| "/metrics".into());
        if !path.starts_with('/') {
            return Err(format!(
                "PROMETHEUS_PATH={path:?}: expected a path such as /metrics"
            ));
        }
        return Ok(Sinks {
            statsd: None,
            prometheus: Some((addr, path)),
        });
    }
    if !plain && !dog {
        return Ok(Sinks::default());
    }
    let port = match var("STATSD_PORT") {
        None => 8125,
        Some(v) => v
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("STATSD_PORT={v:?}: expected a port from 1 to 65535"))?,
    };
    let protocol = match (dog, var("STATSD_PROTOCOL").as_deref()) {
        (true, _) => Protocol::Udp,
        (false, None | Some("tcp" | "tcp4" | "tcp6")) => Protocol::Tcp,
        (false, Some("udp" | "udp4" | "udp6")) => Protocol::Udp,
        (false, Some(other)) => {
            return Err(format!("STATSD_PROTOCOL={other:?}: expected tcp or udp"))
        }
    };
    let flush_interval = match var("STATS_FLUSH_INTERVAL") {
        None => Duration::from_secs(10),
        Some(v) => parse_duration(&v).filter(|d| !d.is_zero()).ok_or_else(|| {
            format!("STATS_FLUSH_INTERVAL={v:?}: expected a duration such as 100ms or 10s")
        })?,
    };
    let mut extra_tags = map("EXTRA_TAGS", var("EXTRA_TAGS").as_deref().unwrap_or(""))?;
    extra_tags.retain(|(k, v)| !k.is_empty() && !v.is_empty());
    extra_tags.sort();
    Ok(Sinks {
        statsd: Some(Statsd {
            host: var("STATSD_HOST").unwrap_or_else(|| "localhost".into()),
            port,
            protocol,
            dog,
            extra_tags,
            flush_interval,
            mogrifiers: match dog {
                true => mogrifiers(var)?,
                false => Vec::new(),
            },
        }),
        prometheus: None,
    })
}

/// A map as envconfig reads one: `k1:v1,k2:v2`, empty for none; a key seen again keeps its
/// last value.
fn map(name: &str, v: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for pair in v.split(',').filter(|pair| !pair.is_empty()) {
        let Some((key, value)) = pair.split_once(':') else {
            return Err(format!(
                "{name}={v:?}: expected name:value pairs such as team:edge,env:prod"
            ));
        };
        pairs.retain(|(k, _)| k != key);
        pairs.push((key.to_owned(), value.to_owned()));
    }
    Ok(pairs)
}

/// `USE_DOG_STATSD_MOGRIFIERS=A,B` and, for each, `DOG_STATSD_MOGRIFIER_A_PATTERN`, `_NAME`
/// and `_TAGS` (the reference's `src/godogstats/mogrifier_map.go`, `newMogrifierMapFromEnv`).
fn mogrifiers(var: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Mogrifier>, String> {
    let list = var("USE_DOG_STATSD_MOGRIFIERS").unwrap_or_default();
    let mut out = Vec::new();
    for name in list.split(',').filter(|n| !n.is_empty()) {
        let prefix = format!("DOG_STATSD_MOGRIFIER_{}", name.to_ascii_uppercase());
        let get = |field: &str| var(&format!("{prefix}_{field}")).unwrap_or_default();
        let (pattern, new_name) = (get("PATTERN"), get("NAME"));
        if pattern.is_empty() {
            return Err(format!(
                "{prefix}_PATTERN: USE_DOG_STATSD_MOGRIFIERS names {name}, which has no pattern"
            ));
        }
        if new_name.is_empty() {
            return Err(format!(
                "{prefix}_NAME: USE_DOG_STATSD_MOGRIFIERS names {name}, which has no name"
            ));
        }
        let tags_name = format!("{prefix}_TAGS");
        let tags = map(&tags_name, &get("TAGS"))?;
        if let Some((k, _)) = tags.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
            return Err(format!(
                "{tags_name}: the tag {k:?} needs a name and a value"
            ));
        }
        let mogrifier = Mogrifier::new(&pattern, new_name, tags)
            .map_err(|e| format!("{prefix}_PATTERN={pattern:?}: {e}"))?;
        out.push(mogrifier);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn sinks(vars: &[(&str, &str)]) -> Result<Sinks, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        read(&|name| map.get(name).map(|v| (*v).to_owned()))
    }

    fn statsd(vars: &[(&str, &str)]) -> Statsd {
        sinks(vars).unwrap().statsd.unwrap()
    }

    /// The reference's defaults (`src/settings/settings.go`, lines 85-97): statsd on, to
    /// localhost:8125, every 10s; gostats's `STATSD_PROTOCOL` is `tcp` unless set
    /// (lyft/gostats `settings.go`).
    #[test]
    fn statsd_is_on_by_default_over_tcp() {
        let on = statsd(&[]);
        assert_eq!(
            (on.host.as_str(), on.port, on.protocol, on.dog),
            ("localhost", 8125, Protocol::Tcp, false)
        );
        assert_eq!(on.flush_interval, Duration::from_secs(10));
        assert!(on.extra_tags.is_empty());
        assert_eq!(
            statsd(&[("STATSD_PROTOCOL", "udp")]).protocol,
            Protocol::Udp
        );
        for off in [[("USE_STATSD", "false")], [("DISABLE_STATS", "true")]] {
            let s = sinks(&off).unwrap();
            assert!(s.statsd.is_none() && s.prometheus.is_none());
        }
        // DISABLE_STATS wins over everything, as runner.go's first case.
        let s = sinks(&[("DISABLE_STATS", "true"), ("USE_PROMETHEUS", "true")]).unwrap();
        assert!(s.statsd.is_none() && s.prometheus.is_none());
    }

    /// runner.go, lines 49-80: more than one of USE_DOG_STATSD, USE_STATSD and USE_PROMETHEUS
    /// stops the start.
    #[test]
    fn one_sink_at_a_time() {
        let e = sinks(&[("USE_PROMETHEUS", "true")]).unwrap_err();
        assert!(
            e.starts_with("USE_STATSD=true and USE_PROMETHEUS=true:"),
            "{e}"
        );
        let e = sinks(&[("USE_DOG_STATSD", "true")]).unwrap_err();
        assert!(e.starts_with("USE_DOG_STATSD=true and USE_STATSD=true:"));
        let prom = sinks(&[("USE_STATSD", "false"), ("USE_PROMETHEUS", "true")]).unwrap();
        assert_eq!(
            prom.prometheus,
            Some(("0.0.0.0:9090".into(), "/metrics".into()))
        );
        assert!(prom.statsd.is_none());
        let dog = statsd(&[("USE_STATSD", "false"), ("USE_DOG_STATSD", "true")]);
        assert!(dog.dog && dog.protocol == Protocol::Udp);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (name, v) in [
            ("STATSD_PORT", "x"),
            ("STATSD_PORT", "0"),
            ("STATSD_PROTOCOL", "quic"),
            ("STATS_FLUSH_INTERVAL", "soon"),
            ("STATS_FLUSH_INTERVAL", "0s"),
            ("EXTRA_TAGS", "novalue"),
            ("USE_STATSD", "yes please"),
            ("DISABLE_STATS", "sure"),
        ] {
            let e = sinks(&[(name, v)]).unwrap_err();
            assert!(e.starts_with(&format!("{name}=")), "{e}");
        }
    }

    /// envconfig's map form; gostats sorts a scope's tags and drops empty ones
    /// (lyft/gostats `internal/tags/tags.go`, `MergeTags`).
    #[test]
    fn extra_tags_are_sorted_and_empty_ones_dropped() {
        let s = statsd(&[("EXTRA_TAGS", "team:edge,env:prod,empty:,team:core")]);
        assert_eq!(
            s.extra_tags,
            [
                ("env".into(), "prod".into()),
                ("team".into(), "core".into())
            ]
        );
    }

    /// `src/godogstats/mogrifier_map.go`: each named mogrifier needs a pattern that compiles
    /// and a name; its tags are a map.
    #[test]
    fn mogrifiers_are_read_from_their_variables() {
        let dog = [
            ("USE_STATSD", "false"),
            ("USE_DOG_STATSD", "true"),
            ("USE_DOG_STATSD_MOGRIFIERS", "hits"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut vars = dog.to_vec();
            vars.extend_from_slice(extra);
            sinks(&vars)
        };
        let e = with(&[]).unwrap_err();
        assert!(e.starts_with("DOG_STATSD_MOGRIFIER_HITS_PATTERN:"), "{e}");
        let e = with(&[("DOG_STATSD_MOGRIFIER_HITS_PATTERN", "^a$")]).unwrap_err();
        assert!(e.starts_with("DOG_STATSD_MOGRIFIER_HITS_NAME:"), "{e}");
        let e = with(&[
            ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", "(unclosed"),
            ("DOG_STATSD_MOGRIFIER_HITS_NAME", "x"),
        ])
        .unwrap_err();
        assert!(e.starts_with("DOG_STATSD_MOGRIFIER_HITS_PATTERN="), "{e}");
        let ok = with(&[
            ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", "^a\\.(.*)$"),
            ("DOG_STATSD_MOGRIFIER_HITS_NAME", "b"),
            ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "rest:$1"),
        ])
        .unwrap();
        assert_eq!(ok.statsd.unwrap().mogrifiers.len(), 1);
    }
}
