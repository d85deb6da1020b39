//! A rule's `response_cost` in the rules file: where its cost is read from the response, and
//! what a request reserves until then (see `Rule::cost_from_response`).
//!
//! ```toml
//! response_cost = { header = "x-usage-tokens", estimate_header = "x-estimated-tokens", estimate = 100, unknown = "zero" }
//! ```

use serde::Deserialize;

use super::value::{Header, Text};
use crate::rules::ResponseCost;

/// `response_cost = { header = ..., estimate_header = ..., estimate = ..., unknown = ... }`:
/// `header` required, the others optional (`estimate` 1, `unknown` `"estimate"`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ResponseCostDoc {
    header: Text<Header>,
    estimate_header: Option<Text<Header>>,
    estimate: Option<Estimate>,
    unknown: Option<Text<Unknown>>,
}

/// `estimate`: a whole number of at least 1.
#[derive(Deserialize)]
#[serde(try_from = "i64")]
pub(super) struct Estimate(u32);

impl TryFrom<i64> for Estimate {
    type Error = String;

    fn try_from(n: i64) -> Result<Self, String> {
        (u32::try_from(n).ok().filter(|&n| n >= 1).map(Estimate)).ok_or_else(|| {
            format!(
                "estimate {n} is out of range (use a whole number from 1 to {})",
                u32::MAX
            )
        })
    }
}

/// What a response that never tells its cost settles at.
pub(super) enum Unknown {
    Estimate,
    Zero,
}

impl std::str::FromStr for Unknown {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "estimate" => Ok(Self::Estimate),
            "zero" => Ok(Self::Zero),
            other => Err(format!(
                "unknown {other:?} is not what an unknown cost settles at (use \"estimate\" or \
                 \"zero\")"
            )),
        }
    }
}

impl ResponseCostDoc {
    /// The rule's [`ResponseCost`].
    pub(super) fn cost(&self) -> ResponseCost {
        let mut cost = ResponseCost::header(self.header.0 .0.as_str());
        if let Some(header) = &self.estimate_header {
            cost = cost.estimate_header(header.0 .0.as_str());
        }
        if let Some(estimate) = &self.estimate {
            cost = cost.estimate(estimate.0);
        }
        cost.unknown_at_zero(matches!(self.unknown, Some(Text(Unknown::Zero))))
    }
}
