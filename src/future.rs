//! [`ResponseFuture`]: checking → calling the inner service | answering at once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::limiter::Verdict;

/// The store's decision, boxed so the future's type does not depend on the store.
pub(crate) type Check = Pin<Box<dyn Future<Output = Verdict> + Send>>;

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
        /// Waiting for the store; then the ready inner service is called with the request.
        Checking {
            check: Check,
            inner: Option<(Svc, Request<ReqBody>)>,
        },
        /// The inner service is answering; the headers are added to its response.
        Inner {
            #[pin]
            future: Svc::Future,
            headers: HeaderMap,
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
    pub(crate) fn checking(check: Check, inner: Svc, request: Request<ReqBody>) -> Self {
        Self {
            state: State::Checking {
                check,
                inner: Some((inner, request)),
            },
        }
    }

    pub(crate) fn inner(future: Svc::Future) -> Self {
        Self {
            state: State::Inner {
                future,
                headers: HeaderMap::new(),
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
                StateProj::Checking { check, inner } => {
                    let verdict = ready!(check.as_mut().poll(cx));
                    let next = match (verdict, inner.take()) {
                        (Verdict::Proceed(headers), Some((mut svc, request))) => State::Inner {
                            future: svc.call(request),
                            headers,
                        },
                        (Verdict::Respond(response), _) => State::Respond {
                            response: Some(response),
                        },
                        // Polled again after completion: answer with an empty 500 rather
                        // than panic (futures must not be polled after completion anyway).
                        (Verdict::Proceed(_), None) => State::Respond { response: None },
                    };
                    this.state.set(next);
                }
                StateProj::Inner { future, headers } => {
                    let mut response = ready!(future.poll(cx))?;
                    for (name, value) in headers.drain() {
                        if let Some(name) = name {
                            response.headers_mut().insert(name, value);
                        }
                    }
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

impl<Svc, ReqBody> fmt::Debug for ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
