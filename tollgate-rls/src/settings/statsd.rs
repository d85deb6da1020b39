//! The statsd push's variables: `STATSD_HOST`, `STATSD_PORT`, `STATSD_PROTOCOL` (read by the
//! reference's gostats), `EXTRA_TAGS` and `STATS_FLUSH_INTERVAL`; for DogStatsD also
//! `USE_DOG_STATSD_MOGRIFIERS`.

use std::time::Duration;

use super::error::SettingsError;
use super::vars::{parse_duration, Vars};
use crate::statsd::{Mogrifier, Protocol, Statsd};

/// The push `vars` describe; DogStatsD's when `dog`.
pub(crate) fn read(vars: &Vars<'_>, dog: bool) -> Result<Statsd, SettingsError> {
    let port = vars.parsed(
        "STATSD_PORT",
        8125,
        |v| v.parse::<u16>().ok().filter(|p| *p != 0),
        "expected a port from 1 to 65535",
    )?;
    let protocol = match (dog, vars.var("STATSD_PROTOCOL").as_deref()) {
        (true, _) => Protocol::Udp,
        (false, None | Some("tcp" | "tcp4" | "tcp6")) => Protocol::Tcp,
        (false, Some("udp" | "udp4" | "udp6")) => Protocol::Udp,
        (false, Some(other)) => {
            let expected = "expected tcp or udp";
            return Err(SettingsError::invalid("STATSD_PROTOCOL", other, expected));
        }
    };
    let flush_interval = vars.parsed(
        "STATS_FLUSH_INTERVAL",
        Duration::from_secs(10),
        |v| parse_duration(v).filter(|d| !d.is_zero()),
        "expected a duration such as 100ms or 10s",
    )?;
    let mut extra_tags = map("EXTRA_TAGS", &vars.get("EXTRA_TAGS", ""))?;
    extra_tags.retain(|(k, v)| !k.is_empty() && !v.is_empty());
    extra_tags.sort();
    Ok(Statsd {
        host: vars.get("STATSD_HOST", "localhost"),
        port,
        protocol,
        dog,
        extra_tags,
        flush_interval,
        mogrifiers: match dog {
            true => mogrifiers(vars)?,
            false => Vec::new(),
        },
    })
}

/// A map as envconfig reads one: `k1:v1,k2:v2`, empty for none; a key seen again keeps its
/// last value.
fn map(name: &str, v: &str) -> Result<Vec<(String, String)>, SettingsError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for pair in v.split(',').filter(|pair| !pair.is_empty()) {
        let Some((key, value)) = pair.split_once(':') else {
            let expected = "expected name:value pairs such as team:edge,env:prod";
            return Err(SettingsError::invalid(name, v, expected));
        };
        pairs.retain(|(k, _)| k != key);
        pairs.push((key.to_owned(), value.to_owned()));
    }
    Ok(pairs)
}

/// `USE_DOG_STATSD_MOGRIFIERS=A,B` and, for each, `DOG_STATSD_MOGRIFIER_A_PATTERN`, `_NAME`
/// and `_TAGS` (the reference's `src/godogstats/mogrifier_map.go`, `newMogrifierMapFromEnv`).
fn mogrifiers(vars: &Vars<'_>) -> Result<Vec<Mogrifier>, SettingsError> {
    let list = vars.get("USE_DOG_STATSD_MOGRIFIERS", "");
    let mut out = Vec::new();
    for name in list.split(',').filter(|n| !n.is_empty()) {
        let prefix = format!("DOG_STATSD_MOGRIFIER_{}", name.to_ascii_uppercase());
        let get = |field: &str| vars.get(&format!("{prefix}_{field}"), "");
        let (pattern, new_name) = (get("PATTERN"), get("NAME"));
        if pattern.is_empty() {
            return Err(SettingsError::unusable(
                format!("{prefix}_PATTERN"),
                format!("USE_DOG_STATSD_MOGRIFIERS names {name}, which has no pattern"),
            ));
        }
        if new_name.is_empty() {
            return Err(SettingsError::unusable(
                format!("{prefix}_NAME"),
                format!("USE_DOG_STATSD_MOGRIFIERS names {name}, which has no name"),
            ));
        }
        let tags_name = format!("{prefix}_TAGS");
        let tags = map(&tags_name, &get("TAGS"))?;
        if let Some((k, _)) = tags.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
            let why = format!("the tag {k:?} needs a name and a value");
            return Err(SettingsError::unusable(tags_name, why));
        }
        let mogrifier = Mogrifier::new(&pattern, new_name, tags)
            .map_err(|e| SettingsError::invalid(format!("{prefix}_PATTERN"), &pattern, e))?;
        out.push(mogrifier);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)], dog: bool) -> Result<Statsd, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup), dog).map_err(|e| e.to_string())
    }

    fn statsd(vars: &[(&str, &str)]) -> Statsd {
        read_from(vars, false).unwrap()
    }

    /// The reference's defaults (`src/settings/settings.go`, lines 85-97): to localhost:8125,
    /// every 10s; gostats's `STATSD_PROTOCOL` is `tcp` unless set (lyft/gostats
    /// `settings.go`); DogStatsD is UDP.
    #[test]
    fn statsd_over_tcp_by_default() {
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
        let dog = read_from(&[], true).unwrap();
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
        ] {
            let e = read_from(&[(name, v)], false).unwrap_err();
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
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut vars = vec![("USE_DOG_STATSD_MOGRIFIERS", "hits")];
            vars.extend_from_slice(extra);
            read_from(&vars, true)
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
        let e = with(&[
            ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", "^a$"),
            ("DOG_STATSD_MOGRIFIER_HITS_NAME", "x"),
            ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "rest:"),
        ])
        .unwrap_err();
        assert!(
            e.starts_with("DOG_STATSD_MOGRIFIER_HITS_TAGS: the tag"),
            "{e}"
        );
        let ok = with(&[
            ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", "^a\\.(.*)$"),
            ("DOG_STATSD_MOGRIFIER_HITS_NAME", "b"),
            ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "rest:$1"),
        ])
        .unwrap();
        assert_eq!(ok.mogrifiers.len(), 1);
    }
}
