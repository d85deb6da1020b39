//! Run with `scripts/layer_instructions.sh` (valgrind's callgrind; about a minute).
//!
//! Sends N requests on one hot key through one layer around a trivial service, on one thread,
//! so that callgrind can count the instructions a request costs: a figure the load of a shared
//! machine does not move, unlike the wall time `versus_governor` measures. The script runs each
//! mode at two values of N and divides the difference by the extra requests, which cancels
//! what starting up costs.
//!
//! `cargo bench --bench layer_instructions -- MODE N` (cargo adds `--bench`, skipped). Modes:
//! `floor` (the trivial service alone), `ietf`, `legacy` and `none` (tollgate's
//! `RateLimitLayer` with each header style). tower_governor is not counted: governor reads the
//! system clock through the vDSO, which valgrind does not count, so its figure would be low.
#![allow(missing_docs, reason = "a benchmark binary")]

use std::convert::Infallible;
use std::hint::black_box;

use axum::body::Body;
use http::{HeaderValue, Request, Response};
use tollgate::{key, HeaderStyle, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

/// The service every layer wraps: an empty answer.
fn trivial(
) -> impl Service<Request<()>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone
{
    tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Body::empty())) })
}

/// `n` requests with the same `x-api-key`, one after the other.
async fn send<S>(service: S, n: u64)
where
    S: Service<Request<()>, Error = Infallible> + Clone,
{
    let key = HeaderValue::from_static("client-1");
    for _ in 0..n {
        let mut request = Request::new(());
        request.headers_mut().insert("x-api-key", key.clone());
        let Ok(response) = service.clone().oneshot(request).await;
        black_box(response);
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [mode, n] = args.as_slice() else {
        eprintln!("usage: layer_instructions MODE N (MODE: floor, ietf, legacy, none)");
        std::process::exit(2);
    };
    let Ok(n) = n.parse::<u64>() else {
        eprintln!("N must be a number of requests, not {n:?}");
        std::process::exit(2);
    };
    // Never exhausted: every request is allowed, as in versus_governor's one-key rows.
    let quota = Quota::per_second(1_000_000)
        .and_then(|q| q.burst(4_000_000_000))
        .expect("a valid quota");
    let layer = |headers| {
        RateLimitLayer::builder()
            .quota(quota)
            .key(key::Header::new("x-api-key"))
            .headers(headers)
            .build()
            .expect("a valid layer")
            .layer(trivial())
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        match mode.as_str() {
            "floor" => send(trivial(), n).await,
            "ietf" => send(layer(HeaderStyle::Ietf), n).await,
            "legacy" => send(layer(HeaderStyle::Legacy), n).await,
            "none" => send(layer(HeaderStyle::None), n).await,
            other => {
                eprintln!("unknown mode {other:?} (floor, ietf, legacy, none)");
                std::process::exit(2);
            }
        }
    });
}
