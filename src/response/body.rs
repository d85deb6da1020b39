//! The response body: the inner service's body (holding the request's slots of requests in
//! flight until it ends, and settling its cost known after the response at its end, if it has
//! them), or the short text of a rejection.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;
use tokio::task::JoinHandle;

use super::Headers;

pin_project! {
    /// The body of a response from a rate-limited service: the inner service's body, or the
    /// body of a response the limiter made (429, 400, 503). Without a type, only the latter:
    /// a refusal from [`Checked::into_result`](crate::Checked::into_result).
    pub struct ResponseBody<B = http_body_util::Empty<Bytes>> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    /// The rarer bodies are boxed, so that a response with the inner service's body is no
    /// larger than the inner service's own (a response is moved by every future it passes
    /// through, by a call to memcpy once it is over 128 bytes).
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Boxed { body: Pin<Box<Rare<B>>> },
    }
}

pin_project! {
    #[project = RareProj]
    enum Rare<B> {
        /// The limiter's own answer.
        Limiter { body: Full<Bytes> },
        /// The inner service's body, and the request's slots of requests in flight: given
        /// back (dropped) when the body ends or fails, or is dropped unfinished; and what is
        /// settled at its end.
        Holding {
            #[pin]
            body: B,
            slots: Option<Slots>,
            at_end: Option<Box<dyn AtEnd>>,
            // The body's end, held until what `at_end` started is done: the settlement, then
            // the last frame (`None`: the end of the stream).
            ending: Option<(JoinHandle<Headers>, Option<Frame<Bytes>>)>,
        },
    }
}

/// A request's slots of requests in flight, as a body holds them: given back when dropped.
pub(crate) type Slots = Box<dyn Send + Sync>;

/// What a body holds until it ends: the request's slots, and what it settles at its end.
#[derive(Default)]
pub(crate) struct Keep {
    pub(crate) slots: Option<Slots>,
    pub(crate) at_end: Option<Box<dyn AtEnd>>,
}

/// Told what a body carries, and its end: a cost known after the response is settled then.
/// Dropped before the end (the body failed or was dropped), it settles as it can.
pub(crate) trait AtEnd: Send + Sync {
    /// A data frame went by.
    fn data(&mut self, data: &Bytes);

    /// The body ended, with these trailers if any: what it started, whose headers go into
    /// the trailers, and which the end waits for (`None`: nothing to wait for).
    fn end(&mut self, trailers: Option<&HeaderMap>) -> Option<JoinHandle<Headers>>;
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn limiter(body: Full<Bytes>) -> Self {
        Self {
            kind: Kind::Boxed {
                body: Box::pin(Rare::Limiter { body }),
            },
        }
    }

    /// The inner service's `body`, holding what `keep` has until it ends.
    pub(crate) fn holding(body: B, keep: Keep) -> Self {
        match keep {
            Keep {
                slots: None,
                at_end: None,
            } => Self::inner(body),
            Keep { slots, at_end } => Self {
                kind: Kind::Boxed {
                    body: Box::pin(Rare::Holding {
                        body,
                        slots,
                        at_end,
                        ending: None,
                    }),
                },
            },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let boxed = match self.project().kind.project() {
            KindProj::Inner { body } => return body.poll_frame(cx),
            KindProj::Boxed { body } => body,
        };
        match boxed.as_mut().project() {
            RareProj::Limiter { body } => Pin::new(body)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|never| match never {}))),
            RareProj::Holding {
                mut body,
                slots,
                at_end,
                ending,
            } => loop {
                if let Some((settling, last)) = ending {
                    // Settled before the end goes out: a client's next request sees it.
                    let settled = ready!(Pin::new(settling).poll(cx)).unwrap_or_default();
                    let mut last = last.take();
                    if let Some(trailers) = last.as_mut().and_then(Frame::trailers_mut) {
                        settled.write_into(trailers);
                    }
                    *ending = None;
                    return Poll::Ready(last.map(Ok));
                }
                let polled = body.as_mut().poll_frame(cx);
                let over = match &polled {
                    Poll::Ready(None | Some(Err(_))) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    Poll::Pending => false,
                };
                if over {
                    // The response is over: its slots go back now, not when the body is
                    // dropped.
                    slots.take();
                }
                let Some(end) = at_end.as_mut() else {
                    return polled;
                };
                let last = match polled {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(data) = frame.data_ref() {
                            end.data(data);
                        }
                        if !over && !frame.is_trailers() {
                            return Poll::Ready(Some(Ok(frame)));
                        }
                        Some(frame)
                    }
                    Poll::Ready(None) => None,
                    // A failed body: dropped, the settlement settles as unknown.
                    Poll::Ready(Some(Err(e))) => {
                        at_end.take();
                        return Poll::Ready(Some(Err(e)));
                    }
                    Poll::Pending => return Poll::Pending,
                };
                let trailers = last.as_ref().and_then(Frame::trailers_ref);
                let started = end.end(trailers);
                at_end.take();
                match started {
                    Some(settling) => *ending = Some((settling, last)),
                    None => return Poll::Ready(last.map(Ok)),
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Boxed { body } => match &**body {
                Rare::Limiter { body } => body.is_end_stream(),
                // Not over while its end is still to be settled (and sent).
                Rare::Holding {
                    body,
                    at_end,
                    ending,
                    ..
                } => at_end.is_none() && ending.is_none() && body.is_end_stream(),
            },
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Boxed { body } => match &**body {
                Rare::Limiter { body } => body.size_hint(),
                Rare::Holding { body, .. } => body.size_hint(),
            },
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::combinators::UnsyncBoxBody;

    use super::*;

    /// A response is moved by every future it passes through: with a boxed body (axum's,
    /// hyper's), wrapping it costs no byte.
    #[test]
    fn a_boxed_body_wrapped_takes_no_more_room() {
        type Boxed = UnsyncBoxBody<Bytes, Infallible>;
        assert_eq!(
            std::mem::size_of::<ResponseBody<Boxed>>(),
            std::mem::size_of::<Boxed>()
        );
    }
}
