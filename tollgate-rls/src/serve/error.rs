//! Why the server did not start, or stopped at start: each with the exit status it gives (2 for
//! a bad setting, 1 for everything else) and a message for stderr.

use std::fmt;
use std::time::Duration;

use super::logging::LoggingError;
use crate::listen::ListenError;
use crate::settings::SettingsError;

/// What stopped the start.
#[derive(Debug)]
pub(crate) enum StartError {
    /// A setting the server cannot start with (status 2).
    Settings(SettingsError),
    /// Logging cannot be set up (status 2).
    Logging(LoggingError),
    /// The async runtime cannot be started.
    Runtime(std::io::Error),
    /// The metrics recorder cannot be installed.
    Metrics(String),
    /// The OTLP exporter cannot be set up (`TRACING_ENABLED`).
    Traces(String),
    /// The statsd push's thread cannot be started.
    Statsd(std::io::Error),
    /// The configuration does not load (a file, or the service's own settings).
    Config(tollgate::ConfigError),
    /// A listener cannot be opened, or the gRPC port's TLS does not load.
    Listen(ListenError),
    /// Redis (as described at start) did not answer within
    /// `REDIS_STARTUP_MAX_ELAPSED_TIME`; its last error.
    StoreUnreachable {
        store: String,
        waited: Duration,
        last: String,
    },
}

impl StartError {
    /// The process's exit status: 2 for a bad setting, 1 otherwise.
    pub(crate) fn exit_status(&self) -> u8 {
        match self {
            Self::Settings(_) | Self::Logging(_) => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Settings(e) => write!(f, "{e}"),
            Self::Logging(e) => write!(f, "cannot set up logging: {e}"),
            Self::Runtime(e) => write!(f, "cannot start the async runtime: {e}"),
            Self::Metrics(e) => write!(f, "cannot set up metrics: {e}"),
            Self::Traces(e) => write!(f, "TRACING_ENABLED: {e}"),
            Self::Statsd(e) => write!(f, "cannot start the statsd push: {e}"),
            Self::Config(e) => write!(f, "{e}"),
            Self::Listen(e) => write!(f, "{e}"),
            Self::StoreUnreachable {
                store,
                waited,
                last,
            } => write!(
                f,
                "{store} did not answer within REDIS_STARTUP_MAX_ELAPSED_TIME ({waited:?}): {last}"
            ),
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Settings(e) => Some(e),
            Self::Logging(e) => Some(e.as_ref()),
            Self::Runtime(e) | Self::Statsd(e) => Some(e),
            Self::Metrics(_) | Self::Traces(_) => None,
            Self::Config(e) => Some(e),
            Self::Listen(e) => Some(e),
            Self::StoreUnreachable { .. } => None,
        }
    }
}

impl From<SettingsError> for StartError {
    fn from(e: SettingsError) -> Self {
        Self::Settings(e)
    }
}

impl From<ListenError> for StartError {
    fn from(e: ListenError) -> Self {
        Self::Listen(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_setting_exits_with_2_and_names_the_variable() {
        let bad = StartError::from(SettingsError::invalid("PORT", "x", "expected a port"));
        assert_eq!(bad.exit_status(), 2);
        assert_eq!(bad.to_string(), "PORT=\"x\": expected a port");
        let down = StartError::StoreUnreachable {
            store: "redis (single, h:1)".into(),
            waited: Duration::from_secs(1),
            last: "refused".into(),
        };
        assert_eq!(down.exit_status(), 1);
        assert!(down.to_string().contains("REDIS_STARTUP_MAX_ELAPSED_TIME"));
    }
}
