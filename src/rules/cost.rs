//! What one request costs under a rule: 1, a number in a header, or a closure's answer.

use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use http::{HeaderName, HeaderValue};

/// Computes a request's cost from its head.
pub(crate) type CostFn = Arc<dyn Fn(&Parts) -> u32 + Send + Sync>;

/// Where a request's cost comes from.
#[derive(Clone, Default)]
pub(crate) enum Cost {
    /// Every request costs 1.
    #[default]
    One,
    /// A header with a whole number of at least 1; anything else is a 400.
    Header(HeaderName),
    /// A closure.
    Fn(CostFn),
    /// Always this (an estimate reserved for a cost known after the response).
    Fixed(u32),
    /// A header as for `Header`, and this when the request has none (an estimate).
    HeaderOr(HeaderName, u32),
}

impl Cost {
    /// The request's cost, from 1 to `max_cost`, or the 400 message when its cost header is
    /// not a whole number of at least 1.
    ///
    /// Costs above `max_cost` count as `max_cost`, however large (even past `u64`): a client
    /// that asks for too much pays the most a request may cost, rather than being refused
    /// for a number it could lower. Only plain digits are a number: no sign, no fraction.
    pub(crate) fn of(&self, parts: &Parts, max_cost: u32) -> Result<u32, String> {
        match self {
            Cost::One => Ok(1),
            Cost::Fn(f) => Ok(f(parts).clamp(1, max_cost)),
            Cost::Fixed(n) => Ok((*n).clamp(1, max_cost)),
            Cost::HeaderOr(name, default) => match parts.headers.get(name) {
                None => Ok((*default).clamp(1, max_cost)),
                Some(value) => header_cost(name, value, max_cost),
            },
            Cost::Header(name) => match parts.headers.get(name) {
                None => Ok(1),
                Some(value) => header_cost(name, value, max_cost),
            },
        }
    }
}

/// The cost in header `name`'s `value`, clamped to `max_cost`, or the 400 message.
fn header_cost(name: &HeaderName, value: &HeaderValue, max_cost: u32) -> Result<u32, String> {
    let text = value.to_str().unwrap_or_default().trim();
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    // Only plain digits reach the parse, so its one failure is overflow.
    let cost = text.parse::<u64>().unwrap_or(u64::MAX);
    if !digits || cost == 0 {
        return Err(format!(
            "Bad Request: the {name} header must be a whole number of at least 1 \
             (costs above {max_cost} count as {max_cost})"
        ));
    }
    Ok(u32::try_from(cost).unwrap_or(u32::MAX).min(max_cost))
}

impl fmt::Debug for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cost::One => f.write_str("One"),
            Cost::Header(h) => f.debug_tuple("Header").field(h).finish(),
            Cost::Fn(_) => f.write_str("Fn(..)"),
            Cost::Fixed(n) => f.debug_tuple("Fixed").field(n).finish(),
            Cost::HeaderOr(h, n) => f.debug_tuple("HeaderOr").field(h).field(n).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cost(value: &str) -> Parts {
        http::Request::builder()
            .header("x-cost", value)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    fn header() -> Cost {
        Cost::Header(HeaderName::from_static("x-cost"))
    }

    #[test]
    fn a_header_cost_is_clamped_to_max_cost() {
        assert_eq!(header().of(&with_cost("3"), 100), Ok(3));
        assert_eq!(header().of(&with_cost(" 7 "), 100), Ok(7));
        assert_eq!(header().of(&with_cost("100"), 100), Ok(100));
        assert_eq!(header().of(&with_cost("101"), 100), Ok(100));
        assert_eq!(header().of(&with_cost("4294967296"), 100), Ok(100));
        // 2^64 - 1, and past what u64 holds: clamped like any other large cost.
        assert_eq!(
            header().of(&with_cost("18446744073709551615"), 100),
            Ok(100)
        );
        assert_eq!(header().of(&with_cost("99999999999999999999999"), 9), Ok(9));
        let none = http::Request::new(()).into_parts().0;
        assert_eq!(header().of(&none, 100), Ok(1));
    }

    #[test]
    fn only_plain_digits_are_a_cost() {
        for bad in ["+5", "-1", "0", "00", "1.5", "1e3", "5 5", "", "abc", "٣"] {
            let e = header().of(&with_cost(bad), 100).unwrap_err();
            assert_eq!(
                e,
                "Bad Request: the x-cost header must be a whole number of at least 1 \
                 (costs above 100 count as 100)",
                "x-cost: {bad:?}"
            );
        }
    }

    #[test]
    fn one_and_closures() {
        let parts = with_cost("5");
        assert_eq!(Cost::One.of(&parts, 10), Ok(1));
        let f = Cost::Fn(Arc::new(|p: &Parts| p.headers.len() as u32 * 50));
        assert_eq!(f.of(&parts, 10), Ok(10));
        let zero = Cost::Fn(Arc::new(|_: &Parts| 0));
        assert_eq!(zero.of(&parts, 10), Ok(1));
    }
}
