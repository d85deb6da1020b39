//! Logs on stderr: `LOG_LEVEL` for this server and tollgate and warnings from everything else,
//! or `RUST_LOG` instead when set; as text, or with `LOG_FORMAT=json` as the reference's JSON
//! (`json_log.rs`).

use tracing_subscriber::EnvFilter;

use super::json_log::LogrusJson;
use crate::settings::Process;

/// Why logging cannot be set up (a logger is already installed).
pub(crate) type LoggingError = Box<dyn std::error::Error + Send + Sync>;

/// Installs the logger `process` asks for.
pub(crate) fn init(process: &Process) -> Result<(), LoggingError> {
    let level = process.log_level;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("warn,tollgate={level},tollgate_rls={level}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match process.log_json {
        true => builder.event_format(LogrusJson).try_init(),
        false => builder.try_init(),
    }
}
