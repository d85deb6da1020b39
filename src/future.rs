//! [`ResponseFuture`]: checking → (waiting, in delay mode) → calling the inner service |
//! answering at once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::limiter::Verdict;
use crate::response::Headers;

/// The limiter's decision in the making, boxed so the future's type does not depend on the
/// store.
pub(crate) type Deciding = Pin<Box<dyn Future<Output = Verdict> + Send>>;

pin_project! {
    /// The response future of [`RateLimit`](crate::RateLimit).
    pub struct ResponseFuture<Svc, ReqBody>
    where
        Svc: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<Svc, ReqBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<Svc, ReqBody>
    where
        Svc: Service<Request<ReqBody>>,
    {
        /// Waiting for the limiter's decision; then the ready inner service is called with
        /// the request.
        Checking {
            deciding: Deciding,
            inner: Option<(Svc, Request<ReqBody>)>,
        },
        /// Delay mode: the request was admitted to the queue and waits for its slot.
        Waiting {
            #[pin]
            sleep: Sleep,
            inner: Option<(Svc, Request<ReqBody>)>,
            headers: Headers,
        },
        /// The inner service is answering; the headers are added to its response.
        Inner {
            #[pin]
            future: Svc::Future,
            headers: Headers,
        },
        /// The limiter answered (429, 400, 503).
        Respond {
            response: Option<Response<Full<Bytes>>>,
        },
    }
}

impl<Svc, ReqBody> ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    pub(crate) fn checking(deciding: Deciding, inner: Svc, request: Request<ReqBody>) -> Self {
        Self {
            state: State::Checking {
                deciding,
                inner: Some((inner, request)),
            },
        }
    }

    pub(crate) fn inner(future: Svc::Future) -> Self {
        Self {
            state: State::Inner {
                future,
                headers: Headers::default(),
            },
        }
    }

    pub(crate) fn respond(response: Response<Full<Bytes>>) -> Self {
        Self {
            state: State::Respond {
                response: Some(response),
            },
        }
    }
}

impl<Svc, ReqBody, ResBody> Future for ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, Svc::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Checking { deciding, inner } => {
                    let next = match ready!(deciding.as_mut().poll(cx)) {
                        Verdict::Proceed { headers, wait } if wait.is_zero() => {
                            call(inner.take(), headers)
                        }
                        Verdict::Proceed { headers, wait } => State::Waiting {
                            sleep: tokio::time::sleep(wait),
                            inner: inner.take(),
                            headers,
                        },
                        Verdict::Respond(response) => State::Respond {
                            response: Some(response),
                        },
                    };
                    this.state.set(next);
                }
                StateProj::Waiting {
                    sleep,
                    inner,
                    headers,
                } => {
                    ready!(sleep.poll(cx));
                    let next = call(inner.take(), std::mem::take(headers));
                    this.state.set(next);
                }
                StateProj::Inner { future, headers } => {
                    let mut response = ready!(future.poll(cx))?;
                    std::mem::take(headers).write_into(response.headers_mut());
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
                StateProj::Respond { response } => {
                    let response = response.take().unwrap_or_else(|| {
                        let mut r = Response::new(Full::default());
                        *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                        r
                    });
                    return Poll::Ready(Ok(response.map(ResponseBody::limiter)));
                }
            }
        }
    }
}

/// The state that calls the ready inner service with the request.
fn call<Svc, ReqBody>(
    inner: Option<(Svc, Request<ReqBody>)>,
    headers: Headers,
) -> State<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    match inner {
        Some((mut svc, request)) => State::Inner {
            future: svc.call(request),
            headers,
        },
        // Polled again after completion: answer with an empty 500 rather than panic
        // (futures must not be polled after completion anyway).
        None => State::Respond { response: None },
    }
}

impl<Svc, ReqBody> fmt::Debug for ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
