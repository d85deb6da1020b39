//! Variables of the reference that tollgate-rls accepts and does not use (logged once, with
//! why), and those that ask for what it cannot do (they stop the start).

use super::error::SettingsError;
use super::vars::{parse_bool, Vars};

/// Variables of the reference that tollgate-rls accepts and does not use, and why.
const IGNORED: &[(&str, &str)] = &[
    (
        "PROMETHEUS_MAPPER_YAML",
        "metrics are named as the reference's default mapping names them",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "metrics are named as the reference's default mapping names them",
    ),
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
        "one multiplexed connection pipelines every call",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection carries every call",
    ),
    ("REDIS_PERSECOND", "one Redis serves every unit"),
    ("REDIS_PERSECOND_URL", "one Redis serves every unit"),
    ("REDIS_PERSECOND_TYPE", "one Redis serves every unit"),
    ("REDIS_PERSECOND_AUTH", "one Redis serves every unit"),
    ("REDIS_PERSECOND_TLS", "one Redis serves every unit"),
    ("REDIS_PERSECOND_POOL_SIZE", "one Redis serves every unit"),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        "a Redis outage is answered by ON_STORE_ERROR, not by failing health checks",
    ),
    (
        "RUNTIME_WATCH_ROOT",
        "the configuration directory is always watched, symlink swaps included",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "the reference never uses it either: its stream retry is built without a retry count",
    ),
    ("TRACING_ENABLED", "tracing is not exported"),
];

/// Variables that ask for something tollgate-rls cannot do: starting would be wrong.
const UNSUPPORTED: &[(&str, &str)] = &[];

/// The ignored variables `vars` set, with why each is ignored.
pub(crate) fn read(vars: &Vars<'_>) -> Vec<(String, &'static str)> {
    (IGNORED.iter())
        .filter(|(name, _)| vars.var(name).is_some())
        .map(|(name, why)| ((*name).to_owned(), *why))
        .collect()
}

/// An error for the first variable that asks for what tollgate-rls cannot do.
pub(crate) fn refuse_unsupported(vars: &Vars<'_>) -> Result<(), SettingsError> {
    for (name, why) in UNSUPPORTED {
        let asked = |v: &String| !v.is_empty() && parse_bool(v) != Some(false);
        if let Some(v) = vars.var(name).filter(asked) {
            return Err(SettingsError::invalid(*name, v, *why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_ignored_variables_are_listed_in_order() {
        let lookup = |name: &str| {
            ["REDIS_PIPELINE_WINDOW", "PROMETHEUS_MAPPER_YAML"]
                .contains(&name)
                .then(|| "x".to_owned())
        };
        let names: Vec<String> = read(&Vars::new(&lookup))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["PROMETHEUS_MAPPER_YAML", "REDIS_PIPELINE_WINDOW"]);
    }
}
