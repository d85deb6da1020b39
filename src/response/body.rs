//! The response body: the inner service's body, or the short text of a rejection.

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
    /// The limiter's body is boxed, so that a response with the inner service's body is no
    /// larger than the inner service's own (a response is moved by every future it passes
    /// through, by a call to memcpy once it is over 128 bytes).
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Limiter { body: Box<Full<Bytes>> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(crate) fn limiter(body: Full<Bytes>) -> Self {
        Self {
            kind: Kind::Limiter {
                body: Box::new(body),
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
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Limiter { body } => Pin::new(&mut **body)
                .poll_frame(cx)
                .map(|frame| frame.map(|f| f.map_err(|never| match never {}))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Limiter { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Limiter { body } => body.size_hint(),
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
