//! [`ResponseFuture`]: checking → (waiting, in delay mode) → calling the inner service (its
//! response passed on, or given headers, or given the request's slots of requests in flight to
//! hold until its body ends, or settling its cost known after the response) → (settling, for
//! a cost in the response head) → (counting, for a rule's `count_status`) | answering at once.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tokio::task::JoinHandle;
use tokio::time::Sleep;
use tower_service::Service;

use crate::limiter::count::{Counter, Counting};
use crate::limiter::give_back::GiveBack;
use crate::limiter::settle::Settlement;
use crate::limiter::slots::Slots;
use crate::limiter::Verdict;
use crate::response::{AtEnd, Headers, Keep, Refusal, ResponseBody};

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
        /// the request. The pair is boxed: this state is for decisions that wait for a store
        /// (which box their future anyway), and the request would make every state as large.
        Checking {
            deciding: Deciding,
            inner: Option<Box<(Svc, Request<ReqBody>)>>,
        },
        /// Delay mode: the request was admitted to the queue and waits for its slot. Boxed: a
        /// rare state, and the largest.
        Waiting {
            delayed: Pin<Box<Delayed<Svc, ReqBody>>>,
        },
        /// The inner service is answering, and its response is passed on as it is (no
        /// headers to add, nothing to count): the usual request without rate-limit headers.
        Passing {
            #[pin]
            future: Svc::Future,
        },
        /// The inner service is answering; the headers are added to its response.
        Inner {
            #[pin]
            future: Svc::Future,
            headers: Headers,
            count: Option<Counter>,
        },
        /// The inner service is answering a request that holds slots of requests in flight:
        /// its body will hold them until it ends. Boxed: a rare state, and every request's
        /// future would otherwise have room for the slots.
        Holding {
            holding: Pin<Box<Holding<Svc, ReqBody>>>,
        },
        /// The response head has the request's cost (a rule priced by the response): it is
        /// sent once the cost is settled (a task of its own, which a hang-up does not stop),
        /// with the headers after it; then counted, if a `count_status` rule lists it.
        Settling {
            settling: JoinHandle<Headers>,
            response: Option<Box<(Svc::Response, Slots, Option<Counter>)>>,
        },
        /// The response has a status a `count_status` rule lists: it is sent once the count
        /// (a task of its own, which a hang-up does not stop) is made, its body holding the
        /// request's slots, if any. Boxed: a rare state.
        Counting {
            counting: Counting,
            response: Option<Box<(Svc::Response, Keep)>>,
        },
        /// The limiter answered (429, 400, 503). Boxed, as the verdict has it: every
        /// request's future would otherwise have room for a whole response.
        Respond {
            response: Option<Box<Response<Full<Bytes>>>>,
        },
    }
}

pin_project! {
    /// A request admitted in delay mode, waiting for its slot (given back if it is dropped
    /// first).
    struct Delayed<Svc, ReqBody> {
        #[pin]
        sleep: Sleep,
        inner: Option<(Svc, Request<ReqBody>)>,
        headers: Headers,
        count: Option<Counter>,
        give_back: GiveBack,
        slots: Slots,
        settle: Option<Settlement>,
    }
}

pin_project! {
    /// A request holding slots of requests in flight, its inner service answering.
    struct Holding<Svc, ReqBody>
    where
        Svc: Service<Request<ReqBody>>,
    {
        #[pin]
        future: Svc::Future,
        headers: Headers,
        count: Option<Counter>,
        slots: Slots,
        settle: Option<Settlement>,
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
                inner: Some(Box::new((inner, request))),
            },
        }
    }

    /// The future of a request decided in `call`: the ready inner service is called now, or
    /// (delay mode) taken along to wait. Inlined into `call` always: the request's head then
    /// goes from the request to the inner service without a copy in between.
    #[inline(always)]
    pub(crate) fn decided(verdict: Verdict, ready: &mut Svc, request: Request<ReqBody>) -> Self
    where
        Svc: Clone,
    {
        let state = match verdict {
            Verdict::Proceed(headers) => answering(ready.call(request), headers, None),
            Verdict::Refuse(refusal) => State::Respond {
                response: Some(refusal.render(request.headers())),
            },
            verdict => after(verdict, Some((take_ready(ready), request))),
        };
        Self { state }
    }

    pub(crate) fn inner(future: Svc::Future) -> Self {
        Self {
            state: State::Passing { future },
        }
    }

    /// The future of a request refused before the store was asked (no key, a bad cost).
    pub(crate) fn refuse(refusal: Refusal, request: &http::HeaderMap) -> Self {
        Self {
            state: State::Respond {
                response: Some(refusal.render(request)),
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
                    let verdict = ready!(deciding.as_mut().poll(cx));
                    let next = after(verdict, inner.take().map(|pair| *pair));
                    this.state.set(next);
                }
                StateProj::Waiting { delayed } => {
                    let delayed = delayed.as_mut().project();
                    ready!(delayed.sleep.poll(cx));
                    delayed.give_back.keep();
                    let (headers, count) = (std::mem::take(delayed.headers), delayed.count.take());
                    let slots = std::mem::take(delayed.slots);
                    let next = call(delayed.inner.take(), headers, count, slots)
                        .settled(delayed.settle.take());
                    this.state.set(next);
                }
                StateProj::Passing { future } => {
                    return future
                        .poll(cx)
                        .map_ok(|response| response.map(ResponseBody::inner));
                }
                StateProj::Inner {
                    future,
                    headers,
                    count,
                } => {
                    let mut response = ready!(future.poll(cx))?;
                    if !headers.is_empty() {
                        std::mem::take(headers).write_into(response.headers_mut());
                    }
                    // Started here, in the poll that has the response: nothing between the
                    // response and the count can be cancelled.
                    if let Some(counting) = count.take().and_then(|c| c.start(response.status())) {
                        this.state.set(State::Counting {
                            counting,
                            response: Some(Box::new((response, Keep::default()))),
                        });
                        continue;
                    }
                    return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                }
                StateProj::Holding { holding } => {
                    let holding = holding.as_mut().project();
                    let mut response = ready!(holding.future.poll(cx))?;
                    if !holding.headers.is_empty() {
                        std::mem::take(holding.headers).write_into(response.headers_mut());
                    }
                    let slots = std::mem::take(holding.slots);
                    let count = holding.count.take();
                    let mut at_end: Option<Box<dyn AtEnd>> = None;
                    if let Some(mut settle) = holding.settle.take() {
                        let (head, body) = response.into_parts();
                        let known = settle.head(&head);
                        response = Response::from_parts(head, body);
                        if !known {
                            at_end = Some(Box::new(settle));
                        } else if let Some(settling) = settle.start() {
                            this.state.set(State::Settling {
                                settling,
                                response: Some(Box::new((response, slots, count))),
                            });
                            continue;
                        }
                    }
                    let keep = Keep {
                        slots: slots.into_guard(),
                        at_end,
                    };
                    if let Some(counting) = count.and_then(|c| c.start(response.status())) {
                        this.state.set(State::Counting {
                            counting,
                            response: Some(Box::new((response, keep))),
                        });
                        continue;
                    }
                    return Poll::Ready(Ok(with_body(response, keep)));
                }
                StateProj::Settling { settling, response } => {
                    // A settlement that panicked changed nothing to report.
                    let settled = ready!(Pin::new(settling).poll(cx)).unwrap_or_default();
                    let Some(answer) = response.take() else {
                        this.state.set(State::Respond { response: None });
                        continue;
                    };
                    let (mut response, slots, count) = *answer;
                    settled.write_into(response.headers_mut());
                    let keep = Keep {
                        slots: slots.into_guard(),
                        at_end: None,
                    };
                    if let Some(counting) = count.and_then(|c| c.start(response.status())) {
                        this.state.set(State::Counting {
                            counting,
                            response: Some(Box::new((response, keep))),
                        });
                        continue;
                    }
                    return Poll::Ready(Ok(with_body(response, keep)));
                }
                StateProj::Counting { counting, response } => {
                    ready!(counting.as_mut().poll(cx));
                    if let Some(answer) = response.take() {
                        let (response, keep) = *answer;
                        return Poll::Ready(Ok(with_body(response, keep)));
                    }
                    this.state.set(State::Respond { response: None });
                }
                StateProj::Respond { response } => {
                    let response = response.take().map_or_else(
                        || {
                            let mut r = Response::new(Full::default());
                            *r.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                            r
                        },
                        |response| *response,
                    );
                    return Poll::Ready(Ok(response.map(ResponseBody::limiter)));
                }
            }
        }
    }
}

/// The state after the limiter's verdict: call the ready inner service with the request,
/// wait for the request's slot first (delay mode), or answer (rendered for the request).
fn after<Svc, ReqBody>(
    verdict: Verdict,
    inner: Option<(Svc, Request<ReqBody>)>,
) -> State<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    match verdict {
        Verdict::Proceed(headers) => call(inner, headers, None, Slots::default()),
        Verdict::Later(later) if later.wait.is_zero() => {
            let later = *later;
            call(inner, later.headers, later.count, later.slots).settled(later.settle)
        }
        Verdict::Later(later) => State::Waiting {
            delayed: Box::pin(Delayed {
                sleep: tokio::time::sleep(later.wait),
                inner,
                headers: later.headers,
                count: later.count,
                give_back: later.give_back,
                slots: later.slots,
                settle: later.settle,
            }),
        },
        Verdict::Refuse(refusal) => State::Respond {
            response: inner.map(|(_, request)| refusal.render(request.headers())),
        },
    }
}

/// The state that calls the ready inner service with the request (its body to hold `slots`).
fn call<Svc, ReqBody>(
    ready: Option<(Svc, Request<ReqBody>)>,
    headers: Headers,
    count: Option<Counter>,
    slots: Slots,
) -> State<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    match ready {
        Some((mut svc, request)) if slots.is_held() => State::Holding {
            holding: Box::pin(Holding {
                future: svc.call(request),
                headers,
                count,
                slots,
                settle: None,
            }),
        },
        Some((mut svc, request)) => answering(svc.call(request), headers, count),
        // Polled again after completion: answer with an empty 500 rather than panic
        // (futures must not be polled after completion anyway).
        None => State::Respond { response: None },
    }
}

/// The state of the inner service answering: its response passed on as it is, or with
/// headers added and counted.
#[inline]
fn answering<Svc, ReqBody>(
    future: Svc::Future,
    headers: Headers,
    count: Option<Counter>,
) -> State<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    match (headers.into_written(), count) {
        (None, None) => State::Passing { future },
        (headers, count) => State::Inner {
            future,
            headers: headers.unwrap_or_default(),
            count,
        },
    }
}

/// The inner service's `response`, its body holding what `keep` has until it ends.
fn with_body<ResBody>(response: Response<ResBody>, keep: Keep) -> Response<ResponseBody<ResBody>> {
    response.map(|body| ResponseBody::holding(body, keep))
}

impl<Svc, ReqBody> State<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    /// This state (just made by [`call`]) with the request's `settle`ment of a cost known
    /// after the response: the inner service's answer is then held until it is settled.
    fn settled(self, settle: Option<Settlement>) -> Self {
        let Some(settle) = settle else {
            return self;
        };
        match self {
            State::Holding { mut holding } => {
                *holding.as_mut().project().settle = Some(settle);
                State::Holding { holding }
            }
            State::Passing { future } => State::holding(future, Headers::default(), None, settle),
            State::Inner {
                future,
                headers,
                count,
            } => State::holding(future, headers, count, settle),
            // Not called: dropped, the settlement settles at the estimate.
            other => other,
        }
    }

    fn holding(
        future: Svc::Future,
        headers: Headers,
        count: Option<Counter>,
        settle: Settlement,
    ) -> Self {
        State::Holding {
            holding: Box::pin(Holding {
                future,
                headers,
                count,
                slots: Slots::default(),
                settle: Some(settle),
            }),
        }
    }
}

/// Takes the service `poll_ready` made ready, for a call made later, and leaves a clone in its
/// place for the next request.
pub(crate) fn take_ready<Svc: Clone>(ready: &mut Svc) -> Svc {
    let clone = ready.clone();
    std::mem::replace(ready, clone)
}

impl<Svc, ReqBody> fmt::Debug for ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    type Trivial = tower::util::ServiceFn<
        fn(Request<()>) -> std::future::Ready<Result<Response<()>, Infallible>>,
    >;

    /// Every request's future is moved a few times on its way (into the caller's own future,
    /// the connection's): the rare states (delay mode, a decision waiting for a store) are
    /// boxed rather than make every request's future as large. It is the inner service's
    /// future, the headers and little else (it was the inner future plus about 530 bytes).
    #[test]
    fn a_response_future_is_the_inner_future_and_its_headers() {
        let inner = std::mem::size_of::<<Trivial as Service<Request<()>>>::Future>();
        let headers = std::mem::size_of::<Headers>();
        let bytes = std::mem::size_of::<ResponseFuture<Trivial, ()>>();
        assert!(
            bytes <= inner + headers + 32,
            "a response future takes {bytes} bytes ({inner} of them the inner future's)"
        );
    }
}
