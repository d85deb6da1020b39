//! The reference's HTTP endpoints: `/healthcheck` and `/json` (any method) and `GET /metrics` on
//! `HOST:PORT` (the debug port's are in `debug.rs`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tollgate_rls::RateLimitService;

use super::health::Health;

#[derive(Clone)]
struct App {
    service: RateLimitService,
    health: Arc<Health>,
    metrics: PrometheusHandle,
}

/// `HOST:PORT`: health, JSON and metrics.
pub(crate) fn main_router(
    service: RateLimitService,
    health: Arc<Health>,
    metrics: PrometheusHandle,
) -> Router {
    Router::new()
        // Any method, as the reference's `router.Path("/healthcheck")` (server_impl.go).
        .route("/healthcheck", any(healthcheck))
        // Any method, as the reference's `HandleFunc("/json", …)` (src/server/server_impl.go).
        .route("/json", any(json))
        .route("/metrics", get(render_metrics))
        .with_state(App {
            service,
            health,
            metrics,
        })
}

async fn healthcheck(State(app): State<App>) -> Response {
    match app.health.ok(&app.service) {
        true => (StatusCode::OK, "OK").into_response(),
        false => (StatusCode::INTERNAL_SERVER_ERROR, "NOT OK\n").into_response(),
    }
}

async fn json(State(app): State<App>, body: Bytes) -> Response {
    let answer = app.service.decide_json(&body).await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = match status {
        StatusCode::BAD_REQUEST => "text/plain; charset=utf-8",
        _ => "application/json",
    };
    (status, [(header::CONTENT_TYPE, content_type)], answer.body).into_response()
}

async fn render_metrics(State(app): State<App>) -> Response {
    metrics_text(&app.metrics)
}

/// `PROMETHEUS_ADDR`: the metrics at `path` (compared as it is, so that no path can be a
/// route pattern), nothing else.
pub(crate) fn prometheus_router(metrics: PrometheusHandle, path: String) -> Router {
    let path: Arc<str> = path.into();
    Router::new().fallback(move |method: Method, uri: Uri| {
        let (metrics, path) = (metrics.clone(), Arc::clone(&path));
        async move {
            match method == Method::GET && uri.path() == &*path {
                true => metrics_text(&metrics),
                false => StatusCode::NOT_FOUND.into_response(),
            }
        }
    })
}

fn metrics_text(metrics: &PrometheusHandle) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        super::metrics::render(metrics),
    )
        .into_response()
}
