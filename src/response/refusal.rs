//! [`Refusal`]: a request the layer answers itself, as the limiter decided it, and its
//! rendering from the request's head: plain text (429, 400, 503) or, for a gRPC request, a
//! trailers-only gRPC status.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

use super::{limiter_response, too_many_requests, GrpcCode, Headers};
use crate::decision::Decision;

/// Builds the response for a denied request, in place of the default 429.
pub(crate) type DenyResponse = Arc<dyn Fn(&Decision) -> Response<String> + Send + Sync>;

/// Why the layer answers a request itself instead of calling the inner service.
pub(crate) enum Refusal {
    /// A blocking rule denied it: the decision that lasts longest, the rate-limit headers of
    /// every rule, and the user's own denial response if one was set.
    Denied {
        decision: Decision,
        headers: Headers,
        custom: Option<DenyResponse>,
    },
    /// The store could not decide, and failing closed was asked for.
    Unavailable,
    /// The request cannot be limited (no client key, a cost that is not a number); the
    /// message says why.
    BadRequest(String),
}

impl Refusal {
    /// The response, as a gRPC status if `head` is a gRPC request's
    /// (`content-type: application/grpc…`).
    pub(crate) fn render(self, head: &HeaderMap) -> Box<Response<Full<Bytes>>> {
        let grpc = is_grpc(head);
        Box::new(match self {
            Self::Denied {
                decision,
                headers,
                custom,
            } => {
                let mut denial = match custom {
                    Some(deny) => deny(&decision).map(|body| Full::new(Bytes::from(body))),
                    None => too_many_requests(&decision, grpc),
                };
                headers.fill_in(denial.headers_mut());
                denial
            }
            Self::Unavailable => limiter_response(
                grpc,
                StatusCode::SERVICE_UNAVAILABLE,
                GrpcCode::Unavailable,
                "Service Unavailable: the rate limiter cannot decide right now",
                Some(Duration::from_secs(1)),
            ),
            Self::BadRequest(message) => limiter_response(
                grpc,
                StatusCode::BAD_REQUEST,
                GrpcCode::InvalidArgument,
                &message,
                None,
            ),
        })
    }
}

/// Whether a request is gRPC (`content-type: application/grpc…`): asked only when the layer
/// answers the request itself, as most requests are passed on.
fn is_grpc(head: &HeaderMap) -> bool {
    head.get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc_head() -> HeaderMap {
        let mut head = HeaderMap::new();
        head.insert(CONTENT_TYPE, "application/grpc+proto".parse().unwrap());
        head
    }

    #[test]
    fn each_refusal_renders_as_http_or_as_a_grpc_status() {
        let denied = || Refusal::Denied {
            decision: Decision::denied(10, 0, Duration::from_secs(6), Some(Duration::from_secs(6))),
            headers: Headers::default(),
            custom: None,
        };
        let http = HeaderMap::new();
        assert_eq!(
            denied().render(&http).status(),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            Refusal::Unavailable.render(&http).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let bad = Refusal::BadRequest("no key".into()).render(&http);
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        for (refusal, code) in [
            (denied(), "8"),
            (Refusal::Unavailable, "14"),
            (Refusal::BadRequest("no key".into()), "3"),
        ] {
            let r = refusal.render(&grpc_head());
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()["grpc-status"], code);
        }
    }

    #[test]
    fn a_custom_denial_is_used_for_grpc_requests_too() {
        let custom: DenyResponse = Arc::new(|_| Response::new("slow down".to_owned()));
        let refusal = Refusal::Denied {
            decision: Decision::denied(1, 0, Duration::from_secs(1), None),
            headers: Headers::default(),
            custom: Some(custom),
        };
        let r = refusal.render(&grpc_head());
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().get("grpc-status").is_none());
    }
}
