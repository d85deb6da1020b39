//! [`ResponseCost`]: a cost known only after the response (tokens of an AI completion, rows
//! of a report, bytes of an export), reserved at admission as an estimate and settled once
//! the response tells the real one.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderName};

use super::{Cost, CostFn};
use crate::error::{ConfigError, ConfigErrorKind};

/// Reads a response's cost from its head (status and headers); `None`: not known there.
pub(crate) type HeadFn = Arc<dyn Fn(&http::response::Parts) -> Option<u64> + Send + Sync>;

/// Reads a cost from one data frame of a streamed body; the last answer wins.
pub(crate) type FrameFn = Arc<dyn Fn(&Bytes) -> Option<u64> + Send + Sync>;

/// Where a rule's cost comes from when only the response knows it, and what a request
/// reserves until then: see [`Rule::cost_from_response`](super::Rule::cost_from_response).
///
/// The cost is read from a response header (or, for a streamed body, the trailer of that
/// name at its end: gRPC metadata and trailers alike), from a function of the response
/// head, or from the data frames of a streamed body (the last event that names it). Only
/// plain digits are a cost (0 included); a cost above the rule's
/// [`max_cost`](super::Rule::max_cost) counts as `max_cost`.
///
/// The estimate a request reserves at admission is [`estimate`](Self::estimate) (default 1),
/// or a request header ([`estimate_header`](Self::estimate_header)), or a function of the
/// request head ([`estimate_fn`](Self::estimate_fn)), from 1 to `max_cost`.
///
/// ```
/// use tollgate::rules::{ResponseCost, Rule};
/// use tollgate::Quota;
///
/// let tokens = Rule::new("tokens", Quota::per_minute(10_000)?)
///     .path("/v1/*")
///     .cost_from_response(
///         ResponseCost::header("x-usage-tokens")
///             .estimate_header("x-estimated-tokens")
///             .estimate(100),
///     );
/// # let _ = tokens;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct ResponseCost {
    source: Source,
    estimate: u32,
    estimate_from: Estimate,
    unknown_at_zero: bool,
}

#[derive(Clone)]
enum Source {
    Header(String),
    Head(HeadFn),
    Frames(FrameFn),
}

#[derive(Clone)]
enum Estimate {
    Default,
    Header(String),
    Fn(CostFn),
}

impl ResponseCost {
    /// The cost is the response header `name`, or, when the head has none, the trailer
    /// `name` at the end of the body (a streamed answer, gRPC trailers).
    pub fn header(name: impl Into<String>) -> Self {
        Self::of(Source::Header(name.into()))
    }

    /// The cost is `f` of the response head (status, headers); `None`: not known, settled
    /// as an unknown cost.
    pub fn from_head<F>(f: F) -> Self
    where
        F: Fn(&http::response::Parts) -> Option<u64> + Send + Sync + 'static,
    {
        Self::of(Source::Head(Arc::new(f)))
    }

    /// The cost is read from the body as it streams: each data frame is given to `f`, and
    /// the last `Some` when the body ends is the cost (e.g. the usage in a completion's last
    /// server-sent event).
    pub fn from_body<F>(f: F) -> Self
    where
        F: Fn(&Bytes) -> Option<u64> + Send + Sync + 'static,
    {
        Self::of(Source::Frames(Arc::new(f)))
    }

    fn of(source: Source) -> Self {
        Self {
            source,
            estimate: 1,
            estimate_from: Estimate::Default,
            unknown_at_zero: false,
        }
    }

    /// What a request reserves when nothing else says (default 1; at least 1).
    #[must_use]
    pub fn estimate(mut self, estimate: u32) -> Self {
        self.estimate = estimate;
        self
    }

    /// Reads each request's estimate from this request header (a whole number ≥ 1, else a
    /// 400); a request without it reserves [`estimate`](Self::estimate).
    #[must_use]
    pub fn estimate_header(mut self, name: impl Into<String>) -> Self {
        self.estimate_from = Estimate::Header(name.into());
        self
    }

    /// Computes each request's estimate from its head (clamped to `1..=max_cost`).
    #[must_use]
    pub fn estimate_fn<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> u32 + Send + Sync + 'static,
    {
        self.estimate_from = Estimate::Fn(Arc::new(f));
        self
    }

    /// A response that never tells its cost (an error without it, a failed or dropped body,
    /// a malformed value) settles at zero, its estimate given back; by default it settles at
    /// its estimate.
    #[must_use]
    pub fn unknown_at_zero(mut self, zero: bool) -> Self {
        self.unknown_at_zero = zero;
        self
    }

    /// The request's cost at admission (its estimate), and the rule's part settled later.
    pub(crate) fn compile(&self) -> Result<(Cost, Priced), ConfigError> {
        let header = |what: &str, name: &str| {
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                ConfigError::with_kind(
                    ConfigErrorKind::Rule,
                    format!("cost_from_response: {what} {name:?} is not a valid header name"),
                )
            })
        };
        if self.estimate == 0 {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                "cost_from_response: the estimate must be at least 1",
            ));
        }
        let cost = match &self.estimate_from {
            Estimate::Default => Cost::Fixed(self.estimate),
            Estimate::Header(name) => {
                Cost::HeaderOr(header("estimate_header", name)?, self.estimate)
            }
            Estimate::Fn(f) => Cost::Fn(Arc::clone(f)),
        };
        let source = match &self.source {
            Source::Header(name) => Found::Header(header("header", name)?),
            Source::Head(f) => Found::Head(Arc::clone(f)),
            Source::Frames(f) => Found::Frames(Arc::clone(f)),
        };
        let priced = Priced {
            source,
            unknown_at_zero: self.unknown_at_zero,
        };
        Ok((cost, priced))
    }
}

/// A rule's cost from the response, compiled: where it is found, and what an unknown one
/// settles at.
pub(crate) struct Priced {
    source: Found,
    unknown_at_zero: bool,
}

enum Found {
    Header(HeaderName),
    Head(HeadFn),
    Frames(FrameFn),
}

impl Priced {
    /// The cost in the response head, if it is there.
    pub(crate) fn in_head(&self, head: &http::response::Parts) -> Option<u64> {
        match &self.source {
            Found::Header(name) => number(&head.headers, name),
            Found::Head(f) => f(head),
            Found::Frames(_) => None,
        }
    }

    /// Whether the cost may still come with the body (a trailer, a data frame).
    pub(crate) fn in_body(&self) -> bool {
        !matches!(self.source, Found::Head(_))
    }

    /// The cost a data frame tells, if any.
    pub(crate) fn in_frame(&self, data: &Bytes) -> Option<u64> {
        match &self.source {
            Found::Frames(f) => f(data),
            _ => None,
        }
    }

    /// The cost in the trailers, if any.
    pub(crate) fn in_trailers(&self, trailers: &HeaderMap) -> Option<u64> {
        match &self.source {
            Found::Header(name) => number(trailers, name),
            _ => None,
        }
    }

    /// What a request that reserved `estimate` settles at, its cost `found` (or not) and
    /// clamped to `max_cost`.
    pub(crate) fn settled(&self, found: Option<u64>, estimate: u32, max_cost: u32) -> u32 {
        match found {
            Some(cost) => u32::try_from(cost).unwrap_or(u32::MAX).min(max_cost),
            None if self.unknown_at_zero => 0,
            None => estimate,
        }
    }
}

/// A header's value as a cost: plain digits (0 included), else `None`; past `u64`, `u64::MAX`.
fn number(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    let text = headers.get(name)?.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse::<u64>().unwrap_or(u64::MAX))
}

impl fmt::Debug for ResponseCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let source = match &self.source {
            Source::Header(name) => name.as_str(),
            Source::Head(_) => "fn(head)",
            Source::Frames(_) => "fn(frame)",
        };
        let estimate_from = match &self.estimate_from {
            Estimate::Default => "default",
            Estimate::Header(name) => name.as_str(),
            Estimate::Fn(_) => "fn(request)",
        };
        f.debug_struct("ResponseCost")
            .field("source", &source)
            .field("estimate", &self.estimate)
            .field("estimate_from", &estimate_from)
            .field("unknown_at_zero", &self.unknown_at_zero)
            .finish()
    }
}

impl fmt::Debug for Priced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Priced")
            .field("unknown_at_zero", &self.unknown_at_zero)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(name: &str, value: &str) -> http::response::Parts {
        let response = http::Response::builder()
            .header(name, value)
            .body(())
            .unwrap();
        response.into_parts().0
    }

    #[test]
    fn only_plain_digits_are_a_cost_and_large_ones_are_clamped() {
        let (_, priced) = ResponseCost::header("x-usage").compile().unwrap();
        assert_eq!(priced.in_head(&head("x-usage", " 42 ")), Some(42));
        assert_eq!(priced.in_head(&head("x-usage", "0")), Some(0));
        for bad in ["-1", "1.5", "1e3", "", "abc", "4 2"] {
            assert_eq!(priced.in_head(&head("x-usage", bad)), None, "{bad:?}");
        }
        let huge = priced.in_head(&head("x-usage", "99999999999999999999999"));
        assert_eq!(priced.settled(huge, 100, 1000), 1000);
        assert_eq!(priced.settled(Some(7), 100, 1000), 7);
        assert_eq!(priced.settled(None, 100, 1000), 100);
        let (_, zero) = ResponseCost::header("x-usage")
            .unknown_at_zero(true)
            .compile()
            .unwrap();
        assert_eq!(zero.settled(None, 100, 1000), 0);
    }

    #[test]
    fn the_estimate_is_the_cost_at_admission() {
        let parts = |value: Option<&str>| {
            let mut request = http::Request::builder();
            if let Some(value) = value {
                request = request.header("x-estimated", value);
            }
            request.body(()).unwrap().into_parts().0
        };
        let (cost, _) = ResponseCost::header("x-usage")
            .estimate_header("x-estimated")
            .estimate(100)
            .compile()
            .unwrap();
        assert_eq!(cost.of(&parts(None), 1000), Ok(100));
        assert_eq!(cost.of(&parts(Some("30")), 1000), Ok(30));
        assert_eq!(cost.of(&parts(Some("3000")), 1000), Ok(1000));
        assert!(cost.of(&parts(Some("x")), 1000).is_err());
        let (fixed, _) = ResponseCost::header("x-usage")
            .estimate(5)
            .compile()
            .unwrap();
        assert_eq!(fixed.of(&parts(None), 3), Ok(3));
        assert!(ResponseCost::header("x-usage")
            .estimate(0)
            .compile()
            .is_err());
        assert!(ResponseCost::header("bad header").compile().is_err());
    }
}
