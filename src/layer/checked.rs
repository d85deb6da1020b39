//! [`Checked`]: what the door answers for one client's cost under one rule, with what the
//! layer would send.

use std::fmt;

use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body_util::Full;

use crate::decision::Decision;
use crate::limiter::slots::Slots;
use crate::response::ResponseBody;

/// The answer of [`Control::check`](crate::Control::check) and
/// [`Control::acquire`](crate::Control::acquire): the store's [`Decision`], and what the layer
/// would send for a request of that client under that rule: its rate-limit headers when
/// allowed, its 429 (or 503 while the store is down with
/// [`OnStoreError::Deny`](crate::store::OnStoreError::Deny)) when refused.
///
/// Under a [limit on requests in flight](crate::rules::Rule::in_flight), an allowed `Checked`
/// holds the client's slot until it is dropped: keep it while the work runs.
pub struct Checked {
    decision: Option<Decision>,
    answer: Answer,
    /// The slot of a request in flight it holds, if any.
    slots: Slots,
}

enum Answer {
    /// Allowed, with the rate-limit headers for the response.
    Allowed(HeaderMap),
    /// Refused, with the response the layer would send (boxed: it is large, and rare).
    Refused(Box<Response<Full<Bytes>>>),
}

impl Checked {
    pub(crate) fn allowed(decision: Option<Decision>, headers: HeaderMap) -> Self {
        Self {
            decision,
            answer: Answer::Allowed(headers),
            slots: Slots::default(),
        }
    }

    /// The same answer, holding `slots` until it is dropped.
    pub(crate) fn holding(mut self, slots: Slots) -> Self {
        self.slots = slots;
        self
    }

    pub(crate) fn refused(
        decision: Option<Decision>,
        response: Box<Response<Full<Bytes>>>,
    ) -> Self {
        Self {
            decision,
            answer: Answer::Refused(response),
            slots: Slots::default(),
        }
    }

    /// Whether the cost was allowed (and charged).
    pub fn is_allowed(&self) -> bool {
        matches!(self.answer, Answer::Allowed(_))
    }

    /// The store's decision; `None` when the store could not decide, and the request was let
    /// through ([`OnStoreError::Allow`](crate::store::OnStoreError::Allow)) or refused with a
    /// 503 ([`Deny`](crate::store::OnStoreError::Deny)).
    pub fn decision(&self) -> Option<&Decision> {
        self.decision.as_ref()
    }

    /// The headers the layer would send: when allowed, the rate-limit headers for the
    /// response (`RateLimit`, `RateLimit-Policy` in the layer's style); when refused, every
    /// header of the refusal (`Retry-After` included).
    pub fn headers(&self) -> &HeaderMap {
        match &self.answer {
            Answer::Allowed(headers) => headers,
            Answer::Refused(response) => response.headers(),
        }
    }

    /// The headers to add to your response when allowed, or the layer's refusal to send
    /// instead: in an axum handler, `?` on it returns the refusal. A slot of a request in
    /// flight it held is given back: keep the `Checked` instead while the work runs.
    ///
    /// ```
    /// use axum::response::{IntoResponse, Response};
    /// use tollgate::{key, Control, Quota, RateLimitLayer};
    ///
    /// async fn upload(control: Control, user: &str) -> Result<impl IntoResponse, Response> {
    ///     let checked = control.check("uploads", user, 1).await.map_err(|e| {
    ///         (http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
    ///     })?;
    ///     let headers = checked.into_result().map_err(IntoResponse::into_response)?;
    ///     Ok((headers, "stored"))
    /// }
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tollgate::ConfigError> {
    /// let control = RateLimitLayer::builder()
    ///     .name("uploads")
    ///     .quota(Quota::per_minute(1)?)
    ///     .key(key::Global)
    ///     .build_control()?;
    /// assert_eq!(upload(control.clone(), "ann").await.into_response().status(), 200);
    /// assert_eq!(upload(control, "ann").await.into_response().status(), 429);
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_result(self) -> Result<HeaderMap, Response<ResponseBody>> {
        match self.answer {
            Answer::Allowed(headers) => Ok(headers),
            Answer::Refused(response) => Err((*response).map(ResponseBody::limiter)),
        }
    }
}

impl fmt::Debug for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checked")
            .field("allowed", &self.is_allowed())
            .field("decision", &self.decision)
            .field("headers", self.headers())
            .finish()
    }
}
