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
        "a counter expires one unit after its last hit; a window's counter is never read \
         after its window, so the jitter would only spread expiries",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "each request's commands go out at once, one pipeline on one multiplexed connection \
         (the reference applies the window to a cluster's write buffering only)",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "deprecated in the reference, where it has no effect either",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "a cluster's pipelines, one per hash slot, go out at once on one multiplexed connection",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection carries every call",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_WINDOW",
        "each request's commands go out at once, one pipeline on one multiplexed connection",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_LIMIT",
        "deprecated in the reference, where it has no effect either",
    ),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "a cluster's pipelines, one per hash slot, go out at once on one multiplexed connection",
    ),
    (
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection carries every call",
    ),
    (
        "REDIS_PERSECOND_TIMEOUT",
        "STORE_TIMEOUT bounds every decision, on either Redis",
    ),
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
