//! The debug port (`DEBUG_HOST:DEBUG_PORT`), as the reference's (`src/server/server_impl.go`,
//! `newServer`): an index of its endpoints at `/`, the configuration in force at `/rlconfig`,
//! the statistics at `/stats` (one `name: value` line each, after the command line, as Go's
//! expvar prints them), and `/debug/pprof/`. tollgate-rls is not a Go program: the index of
//! `/debug/pprof/` lists what it has (the command line) and says how to profile it instead;
//! Go's CPU profile and execution trace (`/debug/pprof/profile`, `/debug/pprof/trace`) answer
//! 501 with the same advice.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tollgate_rls::RateLimitService;

/// The endpoints and what each is for, sorted by path, as the reference's index lists them.
const ENDPOINTS: &[(&str, &str)] = &[
    (
        "/debug/pprof/",
        "root of various pprof endpoints. hit for help.",
    ),
    ("/debug/pprof/profile", "CPU profiling endpoint"),
    ("/debug/pprof/trace", "trace endpoint"),
    (
        "/rlconfig",
        "print out the currently loaded configuration for debugging",
    ),
    ("/stats", "print out stats"),
];

/// How to profile tollgate-rls, where Go's profiles are not.
const PROFILING: &str = "tollgate-rls is a Rust program, without Go's profiles: profile it \
                         with perf (perf record -g -p PID) or any sampling profiler.\n";

#[derive(Clone)]
struct Debug {
    service: RateLimitService,
    metrics: PrometheusHandle,
}

/// The debug port's endpoints.
pub(crate) fn router(service: RateLimitService, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/rlconfig", get(rlconfig))
        .route("/stats", get(stats))
        .route("/debug/pprof/", get(pprof_index))
        .route("/debug/pprof/cmdline", get(cmdline))
        .route("/debug/pprof/profile", get(not_go))
        .route("/debug/pprof/trace", get(not_go))
        .with_state(Debug { service, metrics })
}

async fn index() -> String {
    ENDPOINTS
        .iter()
        .map(|(path, help)| format!("{path}: {help}\n"))
        .collect()
}

async fn rlconfig(State(debug): State<Debug>) -> String {
    debug.service.config().dump()
}

/// `cmdline: [...]`, then every series of `/metrics` as `name{labels}: value`, sorted.
async fn stats(State(debug): State<Debug>) -> String {
    let args: Vec<String> = std::env::args().collect();
    let cmdline = serde_json::to_string(&args).unwrap_or_default();
    let text = super::metrics::render(&debug.metrics);
    let mut lines: Vec<String> = (text.lines())
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, value)| format!("{series}: {value}\n"))
        .collect();
    lines.sort();
    format!("cmdline: {cmdline}\n{}", lines.concat())
}

async fn pprof_index() -> Response {
    let body = format!(
        "/debug/pprof/\n\nProfile Descriptions:\n\ncmdline: The command line invocation of the \
         current program\n\n{PROFILING}"
    );
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

/// The command line, its arguments separated by NUL bytes, as Go's `pprof.Cmdline` writes it.
async fn cmdline() -> String {
    std::env::args().collect::<Vec<_>>().join("\0")
}

async fn not_go() -> Response {
    (StatusCode::NOT_IMPLEMENTED, PROFILING).into_response()
}
