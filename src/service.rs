//! [`RateLimit`], the service the layer wraps around yours.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use crate::future::{take_ready, ResponseFuture};
use crate::limiter::{Limiter, Plan};
use crate::response::ResponseBody;

/// Rate-limits an inner service; made by [`RateLimitLayer`](crate::RateLimitLayer).
///
/// `poll_ready` only asks the inner service: a limited key never stalls readiness for other
/// clients. Denials are responses (429, or a gRPC status for a gRPC request), not errors, so
/// the inner error type is kept and an `Infallible` service stays `Infallible`.
///
/// A request the store can decide at once (the memory store, a cached denial, a lease in
/// hand) is decided and counted in `call`; one that waits for Redis, when its response future
/// is first polled.
pub struct RateLimit<Svc> {
    inner: Svc,
    limiter: Arc<Limiter>,
}

impl<Svc> RateLimit<Svc> {
    pub(crate) fn new(inner: Svc, limiter: Arc<Limiter>) -> Self {
        Self { inner, limiter }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &Svc {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut Svc {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> Svc {
        self.inner
    }
}

impl<Svc, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<Svc>
where
    Svc: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = Svc::Error;
    type Future = ResponseFuture<Svc, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Read once for the request: both ways below decide by them.
        let rules = self.limiter.rules.in_force();
        if let Some(verdict) = self.limiter.express_head(&rules, request.headers()) {
            return ResponseFuture::decided(verdict, &mut self.inner, request);
        }
        let (parts, body) = request.into_parts();
        // The plan borrows the request's head (its key, when a header is the key): decided,
        // or made to own what it keeps, before the head goes back into the request.
        let verdict = match self.limiter.plan(rules, &parts) {
            Plan::Pass => Err(None),
            Plan::Refuse(refusal) => return ResponseFuture::refuse(*refusal, &parts.headers),
            Plan::Decided(verdict) => Ok(verdict),
            // Decided at once (the memory store, a cached denial, a lease in hand).
            Plan::Check(pending) => match self.limiter.decide_ready(&pending) {
                Some(verdict) => Ok(verdict),
                None => Err(Some(pending.owned())),
            },
        };
        match verdict {
            // The head goes back into the request where the inner service takes it: one copy.
            Ok(verdict) => {
                ResponseFuture::decided(verdict, &mut self.inner, Request::from_parts(parts, body))
            }
            Err(None) => ResponseFuture::inner(self.inner.call(Request::from_parts(parts, body))),
            Err(Some(pending)) => {
                let request = Request::from_parts(parts, body);
                // The inner service is called after the decision: take the one `poll_ready`
                // made ready, and leave a clone for the next request.
                let inner = take_ready(&mut self.inner);
                let deciding = Box::pin(Arc::clone(&self.limiter).decide(pending));
                ResponseFuture::checking(deciding, inner, request)
            }
        }
    }
}

/// Lets `Server::builder().add_service(layer.layer(svc))` limit one gRPC service: the wrapped
/// service keeps its route (`/package.Service/...`).
#[cfg(feature = "tonic")]
#[cfg_attr(docsrs, doc(cfg(feature = "tonic")))]
impl<Svc: tonic::server::NamedService> tonic::server::NamedService for RateLimit<Svc> {
    const NAME: &'static str = Svc::NAME;
}

impl<Svc: Clone> Clone for RateLimit<Svc> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<Svc: fmt::Debug> fmt::Debug for RateLimit<Svc> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .finish()
    }
}
