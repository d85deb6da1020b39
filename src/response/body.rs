//! The response body: the inner service's body (holding the request's slots of requests in
//! flight until it ends, if it has any), or the short text of a rejection.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

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
        /// back (dropped) when the body ends or fails, or is dropped unfinished.
        Holding {
            #[pin]
            body: B,
            slots: Option<Slots>,
        },
    }
}

/// A request's slots of requests in flight, as a body holds them: given back when dropped.
pub(crate) type Slots = Box<dyn Send + Sync>;

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

    /// The inner service's `body`, holding `slots` until it ends.
    pub(crate) fn holding(body: B, slots: Option<Slots>) -> Self {
        match slots {
            None => Self::inner(body),
            slots => Self {
                kind: Kind::Boxed {
                    body: Box::pin(Rare::Holding { body, slots }),
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
            RareProj::Holding { mut body, slots } => {
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
                polled
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Boxed { body } => match &**body {
                Rare::Limiter { body } => body.is_end_stream(),
                Rare::Holding { body, .. } => body.is_end_stream(),
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
