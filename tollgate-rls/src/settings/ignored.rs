//! Variables of the reference that tollgate-rls accepts and does not use (logged once, with
//! why), and those that ask for what it cannot do (they stop the start). A value the
//! reference's envconfig cannot read as its type (a number, a boolean, a duration) stops the
//! start here too, as it stops the reference, even where tollgate-rls does not use it.

use super::error::SettingsError;
use super::vars::{parse_bool, parse_duration, Vars};

/// Variables of the reference that tollgate-rls accepts and does not use, and why.
const IGNORED: &[(&str, &str)] = &[
    (
        "MEMCACHE_MAX_IDLE_CONNS",
        "each instance keeps up to 32 connections per memcached server",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "denials are always cached, exactly, until they expire",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "each key expires when its algorithm no longer needs it",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "one multiplexed connection pipelines every call",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "one multiplexed connection pipelines every call",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "checked as the reference checks it; calls to a cluster's nodes are pipelined on \
         multiplexed connections, in parallel",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "checked as the reference checks it (CREATE and ERROR stop the start); a call waits \
         for a connection, as the reference's WAIT",
    ),
    ("REDIS_PERSECOND", "one Redis serves every unit"),
    ("REDIS_PERSECOND_URL", "one Redis serves every unit"),
    ("REDIS_PERSECOND_TYPE", "one Redis serves every unit"),
    ("REDIS_PERSECOND_AUTH", "one Redis serves every unit"),
    ("REDIS_PERSECOND_TLS", "one Redis serves every unit"),
    ("REDIS_PERSECOND_POOL_SIZE", "one Redis serves every unit"),
    (
        "RUNTIME_WATCH_ROOT",
        "the configuration directory is always watched, symlink swaps included (read for an \
         empty RUNTIME_SUBDIRECTORY, as the reference reads it)",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "the reference never uses it either: its stream retry is built without a retry count",
    ),
];

/// Variables that ask for something tollgate-rls cannot do: starting would be wrong.
const UNSUPPORTED: &[(&str, &str)] = &[];

/// The type the reference's envconfig reads a variable as, for the variables tollgate-rls does
/// not otherwise read (the others are read with their types where they are used).
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Go's `strconv.ParseInt(v, 0, 64)`.
    Int,
    /// Go's `strconv.ParseBool`.
    Bool,
    /// Go's `time.ParseDuration`.
    Duration,
}

/// The reference's types of the variables it reads that tollgate-rls does not use
/// (`src/settings/settings.go`).
const KINDS: &[(&str, Kind)] = &[
    ("MEMCACHE_MAX_IDLE_CONNS", Kind::Int),
    ("LOCAL_CACHE_SIZE_IN_BYTES", Kind::Int),
    ("EXPIRATION_JITTER_MAX_SECONDS", Kind::Int),
    ("REDIS_PIPELINE_WINDOW", Kind::Duration),
    ("REDIS_PIPELINE_LIMIT", Kind::Int),
    ("REDIS_CLUSTER_PIPELINE_PARALLELISM", Kind::Int),
    ("RUNTIME_WATCH_ROOT", Kind::Bool),
    ("MEMCACHE_TLS", Kind::Bool),
    ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", Kind::Bool),
];

/// Variables the reference reads only when another setting asks for them, and why they are
/// unused when it does not (`settings.go`: `RedisTlsConfig`, `MemcacheTlsConfig`).
const WITHOUT_TLS: &[(&str, &str)] = &[
    (
        "REDIS_TLS_CACERT",
        "read only with REDIS_TLS=true (or a rediss:// URL), as the reference reads it",
    ),
    (
        "REDIS_TLS_CLIENT_CERT",
        "read only with REDIS_TLS=true (or a rediss:// URL), as the reference reads it",
    ),
    (
        "REDIS_TLS_CLIENT_KEY",
        "read only with REDIS_TLS=true (or a rediss:// URL), as the reference reads it",
    ),
    (
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        "read only with REDIS_TLS=true (or a rediss:// URL), as the reference reads it",
    ),
];

/// The Prometheus sink's mapping: unused without the sink.
const PROMETHEUS_SINK: &[&str] = &[
    "PROMETHEUS_MAPPER_YAML",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
];

/// memcached's TLS variables: unused unless memcached is the store, where `MEMCACHE_TLS=true`
/// stops the start (`refuse_unsupported`).
const MEMCACHE_TLS: &[&str] = &[
    "MEMCACHE_TLS",
    "MEMCACHE_TLS_CLIENT_CERT",
    "MEMCACHE_TLS_CLIENT_KEY",
    "MEMCACHE_TLS_CACERT",
    "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
];

/// The ignored variables `vars` set, with why each is ignored: those never used, and those
/// the rest of the settings leave unused.
pub(crate) fn read(vars: &Vars<'_>) -> Vec<(String, &'static str)> {
    let mut ignored: Vec<(String, &'static str)> = (IGNORED.iter())
        .filter(|(name, _)| vars.var(name).is_some())
        .map(|(name, why)| ((*name).to_owned(), *why))
        .collect();
    let redis_tls = vars.var("REDIS_TLS").as_deref().and_then(parse_bool) == Some(true)
        || vars
            .var("REDIS_URL")
            .is_some_and(|url| url.contains("rediss://"));
    if !redis_tls {
        let set = WITHOUT_TLS
            .iter()
            .filter(|(name, _)| vars.var(name).is_some());
        ignored.extend(set.map(|(name, why)| ((*name).to_owned(), *why)));
    }
    // The reference's Prometheus sink reads them; without it (`runner.go`) they are unused.
    let flag = |name: &str| vars.var(name).as_deref().and_then(parse_bool) == Some(true);
    if !flag("USE_PROMETHEUS") || flag("DISABLE_STATS") {
        let sink = "read by the Prometheus sink (USE_PROMETHEUS=true) only, as in the reference";
        let set = PROMETHEUS_SINK
            .iter()
            .filter(|name| vars.var(name).is_some());
        ignored.extend(set.map(|name| ((*name).to_owned(), sink)));
    }
    let memcache_tls = "unused: memcached over TLS is not supported (MEMCACHE_TLS=true with \
                        BACKEND_TYPE=memcache stops the start)";
    let set = MEMCACHE_TLS.iter().filter(|name| vars.var(name).is_some());
    ignored.extend(set.map(|name| ((*name).to_owned(), memcache_tls)));
    ignored
}

/// An error for the first variable whose value the reference's envconfig cannot read as its
/// type, among those tollgate-rls does not otherwise read.
pub(crate) fn refuse_unreadable(vars: &Vars<'_>) -> Result<(), SettingsError> {
    for (name, kind) in KINDS {
        let Some(v) = vars.var(name) else { continue };
        let (ok, expected) = match kind {
            Kind::Int => (parse_go_int(&v).is_some(), "expected a whole number"),
            Kind::Bool => (parse_bool(&v).is_some(), "expected true or false"),
            Kind::Duration => (
                parse_duration(&v).is_some(),
                "expected a duration such as 500us or 1s",
            ),
        };
        // envconfig reads an empty value as the type's zero, except for booleans.
        let empty_zero = v.is_empty() && !matches!(kind, Kind::Bool);
        if !ok && !empty_zero {
            return Err(SettingsError::invalid(*name, v, expected));
        }
    }
    Ok(())
}

/// Go's `strconv.ParseInt(v, 0, 64)`: an optional sign, then decimal, or `0x`, `0o`, `0b`
/// (and a leading `0` for octal) with `_` between digits.
pub(crate) fn parse_go_int(v: &str) -> Option<i64> {
    let (negative, digits) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(hex) = lower.strip_prefix("0x") {
        (16, hex)
    } else if let Some(octal) = lower.strip_prefix("0o") {
        (8, octal)
    } else if let Some(binary) = lower.strip_prefix("0b") {
        (2, binary)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if body.is_empty() || body.starts_with('_') || body.ends_with('_') || body.contains("__") {
        return None;
    }
    let magnitude = i128::from_str_radix(&body.replace('_', ""), radix).ok()?;
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

/// An error for the first variable that asks for what tollgate-rls cannot do.
pub(crate) fn refuse_unsupported(vars: &Vars<'_>) -> Result<(), SettingsError> {
    for (name, why) in UNSUPPORTED {
        let asked = |v: &String| !v.is_empty() && parse_bool(v) != Some(false);
        if let Some(v) = vars.var(name).filter(asked) {
            return Err(SettingsError::invalid(*name, v, *why));
        }
    }
    let memcached = vars.var("BACKEND_TYPE").as_deref().map(str::trim) == Some("memcache");
    let memcache_tls = vars.var("MEMCACHE_TLS").as_deref().and_then(parse_bool);
    if memcached && memcache_tls == Some(true) {
        return Err(SettingsError::conflict_at(
            "MEMCACHE_TLS",
            "true",
            "with BACKEND_TYPE=memcache: memcached over TLS is not supported by tollgate-rls \
             (use Redis with REDIS_TLS, or memcached without TLS)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_ignored_variables_are_listed_in_order() {
        let lookup = |name: &str| {
            [
                "REDIS_PIPELINE_WINDOW",
                "PROMETHEUS_MAPPER_YAML",
                "LOCAL_CACHE_SIZE_IN_BYTES",
            ]
            .contains(&name)
            .then(|| "x".to_owned())
        };
        let names: Vec<String> = read(&Vars::new(&lookup))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "LOCAL_CACHE_SIZE_IN_BYTES",
                "REDIS_PIPELINE_WINDOW",
                "PROMETHEUS_MAPPER_YAML"
            ]
        );
    }

    /// envconfig reads ints with `strconv.ParseInt(v, 0, 64)`.
    #[test]
    fn go_integers() {
        for (v, n) in [
            ("10", 10),
            ("-3", -3),
            ("0x1f", 31),
            ("010", 8),
            ("1_000", 1000),
        ] {
            assert_eq!(parse_go_int(v), Some(n), "{v}");
        }
        for v in ["", "ten", "1.5", "_1", "0x", "99999999999999999999"] {
            assert_eq!(parse_go_int(v), None, "{v}");
        }
    }

    /// The reference's `settings.go` reads the TLS files only with `REDIS_TLS` (and memcached's
    /// only with `MEMCACHE_TLS`): set without it, they are logged as ignored.
    #[test]
    fn tls_files_without_tls_are_ignored() {
        let names = |set: &[(&str, &str)]| -> Vec<String> {
            let lookup = |name: &str| {
                set.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            };
            read(&Vars::new(&lookup))
                .into_iter()
                .map(|(n, _)| n)
                .collect()
        };
        let ca = ("REDIS_TLS_CACERT", "/ca.pem");
        assert_eq!(names(&[ca]), ["REDIS_TLS_CACERT"]);
        assert!(names(&[ca, ("REDIS_TLS", "true")]).is_empty());
        assert!(names(&[ca, ("REDIS_URL", "rediss://h:1")]).is_empty());
        assert_eq!(names(&[("MEMCACHE_TLS", "true")]), ["MEMCACHE_TLS"]);
    }
}
