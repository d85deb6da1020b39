//! tollgate-rls: a drop-in replacement for Envoy's rate limit service (envoyproxy/ratelimit),
//! serving `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` from the reference's
//! YAML files and environment, decided by this crate's library (see docs/envoy.md).
//!
//! This binary only wires, one folder per part, each depending only on the ones above it:
//!
//! - `statsd/`: the statsd push (`USE_STATSD`, `USE_DOG_STATSD`) and what it is told;
//! - `mapper/`: the Prometheus sink's mapping of the reference's statistics to series
//!   (`PROMETHEUS_MAPPER_YAML`, `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`);
//! - `settings/`: the reference's environment, one file per group of variables, and
//!   `SettingsError`, which names the variable;
//! - `store/`: the store the settings name (Redis, memcached or memory), built in one place;
//! - `traces/`: spans exported over OTLP with `TRACING_ENABLED`;
//! - `listen/`: gRPC on `GRPC_HOST:GRPC_PORT` (over TLS) or `GRPC_UDS`, HTTP on `HOST:PORT`,
//!   `DEBUG_HOST:DEBUG_PORT` and `PROMETHEUS_ADDR`, and what every connection gets;
//! - `serve/`: the steps from the settings to serving (logging, the runtime's threads, the
//!   service, health, the HTTP endpoints, the stop signal);
//! - `config_check/`: `tollgate-rls check DIR` validates a configuration directory without
//!   serving;
//! - `command_line/`: which of serving, `check` and `--help` the arguments ask for.
//!
//! Once listening it prints one line to stdout:
//! `tollgate-rls listening on grpc=ADDR http=ADDR debug=ADDR store=…`. A bad setting exits
//! with status 2, a configuration file that does not load with status 1, each with a message
//! that names the variable or the file.

mod command_line;
mod config_check;
mod listen;
mod mapper;
mod serve;
mod settings;
mod statsd;
mod store;
mod traces;

use std::process::ExitCode;

use crate::command_line::Command;
use crate::serve::StartError;
use crate::settings::Settings;

fn main() -> ExitCode {
    match command_line::parse(std::env::args().skip(1)) {
        Command::Serve => {}
        Command::Check(args) => return config_check::run(args.into_iter()),
        Command::Help => return command_line::help(),
        Command::Unknown(arg) => return command_line::refuse(&arg),
    }
    let ended = Settings::from_env()
        .map_err(StartError::from)
        .and_then(serve::start);
    match ended {
        Ok(ended) => ended,
        Err(e) => {
            eprintln!("tollgate-rls: {e}");
            ExitCode::from(e.exit_status())
        }
    }
}
