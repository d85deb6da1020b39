//! What clients are told: rate-limit headers, the 429, and the gRPC mapping ([`Refusal`]).

use std::borrow::Cow;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;

use crate::decision::Decision;
use crate::error::ConfigError;

mod body;
mod kept;
mod refusal;
pub use body::ResponseBody;
pub(crate) use body::{AtEnd, Keep};
pub(crate) use kept::{kept, kept_static};
pub(crate) use refusal::{DenyResponse, Refusal};

/// Which rate-limit headers responses carry, on allowed and denied requests alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// IETF draft-ietf-httpapi-ratelimit-headers-11: `RateLimit-Policy: "name";q=100;w=60`
    /// and `RateLimit: "name";r=42;t=17`. The default.
    #[default]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (delta seconds), as
    /// GitHub and many older clients read them.
    Legacy,
    /// Both of the above.
    Both,
    /// No rate-limit headers (denials still carry `Retry-After`).
    None,
}

/// Parses `ietf`, `legacy`, `both` or `none`, e.g. from an environment variable.
///
/// ```
/// use tollgate::HeaderStyle;
///
/// assert_eq!("legacy".parse::<HeaderStyle>()?, HeaderStyle::Legacy);
/// assert!("x-ratelimit".parse::<HeaderStyle>().is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
impl std::str::FromStr for HeaderStyle {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ietf" => Ok(Self::Ietf),
            "legacy" => Ok(Self::Legacy),
            "both" => Ok(Self::Both),
            "none" => Ok(Self::None),
            other => Err(ConfigError::new(format!(
                "unknown header style {other:?} (use ietf, legacy, both or none)"
            ))),
        }
    }
}

use names::{RATELIMIT, RATELIMIT_POLICY, X_LIMIT, X_REMAINING, X_RESET};

/// The rate-limit headers' names: constants, not statics. A response takes a name copied from
/// a constant, where cloning a static custom name calls through its bytes' vtable and reads
/// the copy back (a stall, on every request).
#[allow(
    clippy::declare_interior_mutable_const,
    reason = "a name's static bytes: each use is a copy, never mutated"
)]
mod names {
    use http::HeaderName;

    /// `RateLimit-Policy`, from draft-ietf-httpapi-ratelimit-headers-11.
    pub(super) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
    /// `RateLimit`, from draft-ietf-httpapi-ratelimit-headers-11.
    pub(super) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
    pub(super) const X_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
    pub(super) const X_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
    pub(super) const X_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
}

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// gRPC status codes the limiter answers with.
#[derive(Debug, Clone, Copy)]
enum GrpcCode {
    InvalidArgument = 3,
    ResourceExhausted = 8,
    Unavailable = 14,
}

/// Whole seconds, rounded up: a client that waits this long is not early.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The rate-limit headers of one response. They are made when the store answers, before
/// there is a response, and go straight into the response's own map once there is one.
/// Nothing when there are none; the usual IETF headers of one rule are the rule's held item
/// and two numbers, written out only into the response; any other set is made whole, in a box.
/// A request's future carries them from the decision to the response, and is moved on the
/// way (a box costs less than moving five values).
#[derive(Debug)]
pub(crate) struct Headers(Repr);

#[derive(Debug)]
enum Repr {
    /// `RateLimit-Policy` (this item) and `RateLimit` (its name, remaining `r`, and `t` in
    /// whole seconds), for a request under one rule's own quota: nothing allocated until the
    /// response has them. The numbers are packed, `r` high and `t` low, each below 2^32.
    Ietf(&'static HeaderValue, u64),
    /// Each value made whole; `None`: no headers.
    Made(Option<Box<Values>>),
}

impl Default for Headers {
    fn default() -> Self {
        Self(Repr::Made(None))
    }
}

/// Each header's value: `RateLimit-Policy`, `RateLimit`, then `X-RateLimit-Limit`,
/// `-Remaining` and `-Reset`; `None` for those the style leaves out.
type Values = [Option<HeaderValue>; 5];

impl Headers {
    /// The IETF headers of a request under one rule's own quota, its item held for the life of
    /// the process; `None` if a number does not fit (then they are made whole).
    #[inline]
    pub(crate) fn ietf_of_one(item: &'static HeaderValue, decision: &Decision) -> Option<Self> {
        let remaining = u32::try_from(decision.remaining).ok()?;
        let reset = u32::try_from(ceil_secs(decision.reset_after)).ok()?;
        Some(Self(Repr::Ietf(
            item,
            u64::from(remaining) << 32 | u64::from(reset),
        )))
    }

    /// These headers, if there are any to write: `None` is nothing to drop either.
    #[inline]
    pub(crate) fn into_written(self) -> Option<Self> {
        if self.is_empty() {
            // Holds nothing: forgotten rather than run through the drop of every kind.
            std::mem::forget(self);
            return None;
        }
        Some(self)
    }

    /// Whether there are none (the style `none`, a store that failed open).
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self.0, Repr::Made(None))
    }

    /// Sets them on a response, replacing headers of the same name.
    pub(crate) fn write_into(self, h: &mut HeaderMap) {
        let mut values = match self.0 {
            Repr::Made(Some(values)) => values,
            Repr::Made(None) => return,
            Repr::Ietf(item, numbers) => {
                h.insert(RATELIMIT_POLICY, item.clone());
                if let Some(current) = current_of_item(item, numbers) {
                    h.insert(RATELIMIT, current);
                }
                return;
            }
        };
        // Taken out of the box one by one: moving the whole of it out is a copy.
        let [policy, current, limit, remaining, reset] = &mut *values;
        if let Some(value) = policy.take() {
            h.insert(RATELIMIT_POLICY, value);
        }
        if let Some(value) = current.take() {
            h.insert(RATELIMIT, value);
        }
        if let Some(value) = limit.take() {
            h.insert(X_LIMIT, value);
        }
        if let Some(value) = remaining.take() {
            h.insert(X_REMAINING, value);
        }
        if let Some(value) = reset.take() {
            h.insert(X_RESET, value);
        }
    }

    /// Adds those a response does not set itself (a custom denial's own headers win).
    pub(crate) fn fill_in(self, h: &mut HeaderMap) {
        let values = match self.0 {
            Repr::Made(Some(values)) => *values,
            Repr::Made(None) => return,
            Repr::Ietf(item, numbers) => [
                Some(item.clone()),
                current_of_item(item, numbers),
                None,
                None,
                None,
            ],
        };
        let names = [RATELIMIT_POLICY, RATELIMIT, X_LIMIT, X_REMAINING, X_RESET];
        for (name, value) in names.into_iter().zip(values) {
            if let Some(value) = value {
                h.entry(name).or_insert(value);
            }
        }
    }
}

/// `RateLimit`'s value for a policy's item of `RateLimit-Policy`, `"name";q=100;w=60`, and
/// the packed numbers of [`Repr::Ietf`]: `"name";r=42;t=17`.
fn current_of_item(item: &HeaderValue, numbers: u64) -> Option<HeaderValue> {
    let item = item.as_bytes();
    // A policy's name has no `"` (ASCII letters, digits and `-_.`): the second one ends it.
    let end = 1 + item.get(1..)?.iter().position(|&b| b == b'"')?;
    current_value(
        item.get(1..end)?,
        numbers >> 32,
        numbers & u64::from(u32::MAX),
    )
}

/// A header value written piece by piece, numbers included, without `format!`.
struct Value(BytesMut);

impl Value {
    fn new() -> Self {
        // Room for a policy name (at most 64 bytes) and its numbers.
        Self(BytesMut::with_capacity(96))
    }

    fn text(mut self, text: &str) -> Self {
        self.0.extend_from_slice(text.as_bytes());
        self
    }

    fn number(self, n: u64) -> Self {
        self.text(itoa::Buffer::new().format(n))
    }
}

/// How many decimal digits `n` has.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Appends `n` in decimal.
#[inline]
fn push_decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A value from `out`, written to exactly its capacity: it becomes the value's bytes without
/// a copy or a second allocation. `None` only if it were not a valid header value, and every
/// value written here is ASCII (policy names are checked).
fn exact_value(out: Vec<u8>) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(Bytes::from(out)).ok()
}

/// `RateLimit`'s value, `"name";r=42;t=17`.
fn current_value(name: &[u8], remaining: u64, reset: u64) -> Option<HeaderValue> {
    // The numbers written first, so that their lengths size the value.
    let (mut r, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (r, t) = (r.format(remaining).as_bytes(), t.format(reset).as_bytes());
    let mut out = Vec::with_capacity(8 + name.len() + r.len() + t.len());
    out.push(b'"');
    out.extend_from_slice(name);
    out.extend_from_slice(b"\";r=");
    out.extend_from_slice(r);
    out.extend_from_slice(b";t=");
    out.extend_from_slice(t);
    exact_value(out)
}

/// A legacy header's value: a number.
fn number_value(n: u64) -> Option<HeaderValue> {
    let mut out = Vec::with_capacity(digits(n));
    push_decimal(&mut out, n);
    exact_value(out)
}

/// A policy as the headers show it: its name, and its item of `RateLimit-Policy` (see
/// [`policy_item`]), written once for a rule's own policy and made for a tier's.
pub(crate) struct Shown<'a> {
    pub(crate) name: &'a str,
    pub(crate) item: Cow<'a, HeaderValue>,
}

/// A policy's item of `RateLimit-Policy`, `"name";q=100;w=60` (`limit` per `period`).
pub(crate) fn policy_item(name: &str, limit: u32, period: Duration) -> HeaderValue {
    let item = (Value::new().text("\""))
        .text(name)
        .text("\";q=")
        .number(u64::from(limit))
        .text(";w=")
        .number(ceil_secs(period).max(1));
    // A policy's name is checked to be ASCII letters, digits and `-_.`: always valid.
    HeaderValue::from_maybe_shared(item.0.freeze()).unwrap_or(HeaderValue::from_static(""))
}

/// A limit on requests in flight's item of `RateLimit-Policy`,
/// `"name";q=4;qu="concurrent-requests"` (at most `max` at once; no window).
pub(crate) fn in_flight_item(name: &str, max: u32) -> HeaderValue {
    let item = (Value::new().text("\""))
        .text(name)
        .text("\";q=")
        .number(u64::from(max))
        .text(";qu=\"concurrent-requests\"");
    // A limit's name is checked to be ASCII letters, digits and `-_.`: always valid.
    HeaderValue::from_maybe_shared(item.0.freeze()).unwrap_or(HeaderValue::from_static(""))
}

/// The rate-limit headers for every policy that applied to the request.
///
/// `RateLimit-Policy` lists every policy; `RateLimit` and the legacy headers report the most
/// restrictive one (the fewest remaining).
pub(crate) fn rate_limit_headers(style: HeaderStyle, checks: &[(Shown<'_>, Decision)]) -> Headers {
    if style == HeaderStyle::None {
        return Headers::default();
    }
    let Some(tightest) = checks.iter().min_by_key(|(_, d)| d.remaining) else {
        return Headers::default();
    };
    let (policy, decision) = tightest;
    let reset = ceil_secs(decision.reset_after);
    let ietf = || {
        let policies = match checks {
            // A rule's own item is kept (see `kept`): copied, not counted.
            [(one, _)] => Some(one.item.as_ref().clone()),
            many => {
                let mut policies = Value::new();
                for (i, (p, _)) in many.iter().enumerate() {
                    policies
                        .0
                        .extend_from_slice(if i == 0 { b"" } else { b", " });
                    policies.0.extend_from_slice(p.item.as_bytes());
                }
                HeaderValue::from_maybe_shared(policies.0.freeze()).ok()
            }
        };
        let current = current_value(policy.name.as_bytes(), decision.remaining, reset);
        (policies, current)
    };
    let legacy = || {
        let legacy = (
            number_value(decision.limit),
            number_value(decision.remaining),
            number_value(reset),
        );
        match legacy {
            (Some(limit), Some(remaining), Some(reset)) => {
                [Some(limit), Some(remaining), Some(reset)]
            }
            _ => [None, None, None],
        }
    };
    // Each made whole, in its box: nothing written twice.
    let values = match style {
        HeaderStyle::Legacy => {
            let [limit, remaining, reset] = legacy();
            [None, None, limit, remaining, reset]
        }
        HeaderStyle::Both => {
            let (policies, current) = ietf();
            let [limit, remaining, reset] = legacy();
            [policies, current, limit, remaining, reset]
        }
        _ => {
            let (policies, current) = ietf();
            [policies, current, None, None, None]
        }
    };
    Headers(Repr::Made(Some(Box::new(values))))
}

fn insert(h: &mut HeaderMap, name: &HeaderName, value: String) {
    // Every value written here is ASCII made by format!, so it is always a valid header value.
    if let Ok(value) = HeaderValue::try_from(value) {
        h.insert(name.clone(), value);
    }
}

/// A response the layer makes itself, as plain text or a gRPC trailers-only response.
fn limiter_response(
    grpc: bool,
    status: StatusCode,
    grpc_code: GrpcCode,
    message: &str,
    retry_after: Option<Duration>,
) -> Response<Full<Bytes>> {
    let mut response = if grpc {
        let mut r = Response::new(Full::default());
        let h = r.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        h.insert(GRPC_STATUS.clone(), HeaderValue::from(grpc_code as u16));
        insert(h, &GRPC_MESSAGE, grpc_percent_encode(message));
        if let Some(wait) = retry_after {
            let ms = u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
            h.insert(GRPC_PUSHBACK.clone(), HeaderValue::from(ms));
        }
        r
    } else {
        let mut body = Vec::with_capacity(message.len() + 1);
        body.extend_from_slice(message.as_bytes());
        body.push(b'\n');
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    if let Some(wait) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(ceil_secs(wait).max(1)));
    }
    response
}

/// The 429 (or RESOURCE_EXHAUSTED) for a denied request.
fn too_many_requests(decision: &Decision, grpc: bool) -> Response<Full<Bytes>> {
    // Written piece by piece: a flooded key gets this on every request.
    let mut retry_in = String::new();
    let message = match decision.retry_after {
        Some(wait) => {
            retry_in.push_str("Too Many Requests: rate limit exceeded, retry in ");
            retry_in.push_str(itoa::Buffer::new().format(ceil_secs(wait).max(1)));
            retry_in.push_str(" s");
            retry_in.as_str()
        }
        None => "Too Many Requests: this request costs more than the whole quota",
    };
    limiter_response(
        grpc,
        StatusCode::TOO_MANY_REQUESTS,
        GrpcCode::ResourceExhausted,
        message,
        decision.retry_after,
    )
}

/// gRPC's `grpc-message` is percent-encoded outside printable ASCII (and `%` itself).
fn grpc_percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{Policy, Quota};
    use crate::Algorithm;

    fn policy(name: &str, quota: Quota) -> Policy {
        Policy::new(name, quota, Algorithm::Gcra).unwrap()
    }

    fn shown(policy: &Policy) -> Shown<'_> {
        let quota = policy.quota();
        let item = policy_item(policy.name(), quota.limit(), quota.period());
        Shown {
            name: policy.name(),
            item: Cow::Owned(item),
        }
    }

    fn decision(remaining: u64, reset_ms: u64) -> Decision {
        Decision::allowed(100, remaining, Duration::from_millis(reset_ms))
    }

    #[test]
    fn ietf_headers_list_every_policy_and_report_the_tightest() {
        let (a, b) = (
            policy("burst", Quota::per_second(10).unwrap()),
            policy("daily", Quota::per_day(1000).unwrap()),
        );
        let mut h = HeaderMap::new();
        rate_limit_headers(
            HeaderStyle::Ietf,
            &[
                (shown(&a), decision(7, 300)),
                (shown(&b), decision(3, 86_000_001)),
            ],
        )
        .write_into(&mut h);
        assert_eq!(
            h["ratelimit-policy"],
            "\"burst\";q=10;w=1, \"daily\";q=1000;w=86400"
        );
        assert_eq!(h["ratelimit"], "\"daily\";r=3;t=86001");
        assert!(h.get("x-ratelimit-limit").is_none());
    }

    /// The usual headers (IETF, one rule) written from the rule's held item are byte for byte
    /// the ones made whole, written or filled in; numbers past 2^32 are made whole.
    #[test]
    fn one_rules_ietf_headers_are_the_made_ones() {
        let a = policy("api.v-1_x", Quota::per_minute(100).unwrap());
        let item = kept_static(&shown(&a).item).unwrap();
        for d in [decision(42, 16_001), decision(0, 0), decision(99, 59_999)] {
            let mut made = HeaderMap::new();
            rate_limit_headers(HeaderStyle::Ietf, &[(shown(&a), d)]).write_into(&mut made);
            let mut one = HeaderMap::new();
            Headers::ietf_of_one(item, &d).unwrap().write_into(&mut one);
            assert_eq!(one, made);
            let mut filled = HeaderMap::new();
            filled.insert(RATELIMIT, HeaderValue::from_static("own"));
            Headers::ietf_of_one(item, &d).unwrap().fill_in(&mut filled);
            assert_eq!(filled[RATELIMIT], "own");
            assert_eq!(filled[RATELIMIT_POLICY], made[RATELIMIT_POLICY]);
        }
        assert!(Headers::ietf_of_one(item, &decision(1 << 32, 1)).is_none());
        assert!(!Headers::ietf_of_one(item, &decision(1, 1))
            .unwrap()
            .is_empty());
        assert!(Headers::default().into_written().is_none());
    }

    #[test]
    fn legacy_headers_use_delta_seconds_rounded_up() {
        let a = policy("api", Quota::per_minute(100).unwrap());
        let mut h = HeaderMap::new();
        rate_limit_headers(HeaderStyle::Legacy, &[(shown(&a), decision(42, 16_001))])
            .write_into(&mut h);
        assert_eq!(h["x-ratelimit-limit"], "100");
        assert_eq!(h["x-ratelimit-remaining"], "42");
        assert_eq!(h["x-ratelimit-reset"], "17");
        assert!(h.get("ratelimit").is_none());
        let mut none = HeaderMap::new();
        rate_limit_headers(HeaderStyle::None, &[(shown(&a), decision(42, 1))])
            .write_into(&mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn numbers_are_written_in_exactly_their_digits() {
        for n in [0, 7, 9, 10, 99, 100, 4_000_000_000, u64::MAX] {
            let mut out = b"x=".to_vec();
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x={n}").as_bytes());
            assert_eq!(number_value(n).unwrap(), n.to_string().as_str());
        }
        let value = current_value(b"api", 0, 17).unwrap();
        assert_eq!(value, "\"api\";r=0;t=17");
        assert_eq!(value.len(), 14);
    }

    #[test]
    fn grpc_denial_is_trailers_only_with_pushback() {
        let d = Decision::denied(
            100,
            0,
            Duration::from_millis(2_000),
            Some(Duration::from_micros(1_500_001)),
        );
        let r = too_many_requests(&d, true);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["grpc-status"], "8");
        assert_eq!(r.headers()["grpc-retry-pushback-ms"], "1501");
        assert_eq!(r.headers()["retry-after"], "2");
        assert_eq!(r.headers()["content-type"], "application/grpc");
    }

    #[test]
    fn http_denial_rounds_retry_after_up() {
        let d = Decision::denied(
            100,
            0,
            Duration::from_millis(2_000),
            Some(Duration::from_millis(100)),
        );
        let r = too_many_requests(&d, false);
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()["retry-after"], "1");
        assert_eq!(grpc_percent_encode("a%b\u{e9}"), "a%25b%C3%A9");
    }
}
