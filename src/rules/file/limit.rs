//! What a `[[rule]]` limits, as the file says it: a rate (its quota, and the quotas per client
//! a lookup or an override gives at run time), or requests in flight, which refuses the
//! settings of a rate.

use std::ops::Range;

use toml::Spanned;

use super::{pick, Fail, RuleDoc, Settings};
use crate::error::ConfigError;
use crate::quota::Quota;
use crate::rules::{NamedLookups, Rule};

/// The quota of a rate rule (its own, else `[defaults]`'s).
pub(super) fn rate_of(
    doc: &RuleDoc,
    defaults: &Settings,
    header: Range<usize>,
    fail: &Fail<'_>,
) -> Result<Quota, ConfigError> {
    match pick(&doc.quota, &defaults.quota) {
        Some(quota) => Ok(quota.get_ref().0),
        None => Err(fail(
            header,
            "quota",
            &"missing: set quota in the rule or in [defaults], e.g. quota = \"100/min\" (or \
              in_flight = 4 for a limit on requests in flight)",
        )),
    }
}

/// Refuses the rate settings a limit on requests in flight cannot have, where the rule itself
/// sets them (those of `[defaults]` do not apply to it).
pub(super) fn refuse_rate_settings(doc: &RuleDoc, fail: &Fail<'_>) -> Result<(), ConfigError> {
    let span = |v: Option<Range<usize>>, field: &'static str| v.map(|span| (span, field));
    let set = [
        span(doc.quota.as_ref().map(Spanned::span), "quota"),
        span(doc.algorithm.as_ref().map(Spanned::span), "algorithm"),
        span(doc.cost_header.as_ref().map(|_| 0..0), "cost_header"),
        span(doc.max_cost.as_ref().map(|_| 0..0), "max_cost"),
        span(doc.block_for.as_ref().map(Spanned::span), "block_for"),
        span(doc.count_status.as_ref().map(Spanned::span), "count_status"),
        span(doc.lease.as_ref().map(Spanned::span), "lease"),
        span(doc.quota_from.as_ref().map(Spanned::span), "quota_from"),
        span(doc.overridable.as_ref().map(|_| 0..0), "overridable"),
        span(
            doc.response_cost.as_ref().map(Spanned::span),
            "response_cost",
        ),
    ];
    let Some((span, field)) = set.into_iter().flatten().next() else {
        return Ok(());
    };
    let span = match span {
        // Read without a span: point at in_flight, which makes them wrong.
        span if span == (0..0) => doc.in_flight.as_ref().map_or(span, Spanned::span),
        span => span,
    };
    Err(fail(
        span,
        field,
        &format!(
            "{field} applies to a rate, and this rule limits requests in flight (in_flight): \
             write the rate as a rule of its own"
        ),
    ))
}

/// A rate rule's quotas per client: `quota_from` (one of `lookups`, by name) and
/// `overridable`, its own or `[defaults]`'s.
pub(super) fn client_quotas(
    mut rule: Rule,
    doc: &RuleDoc,
    defaults: &Settings,
    lookups: &NamedLookups,
    fail: &Fail<'_>,
) -> Result<Rule, ConfigError> {
    if let Some(named) = pick(&doc.quota_from, &defaults.quota_from) {
        let Some(lookup) = lookups.get(named.get_ref()) else {
            let known: Vec<&str> = lookups.keys().map(String::as_str).collect();
            let message = format!(
                "unknown quota lookup {:?}: {}",
                named.get_ref(),
                match known.as_slice() {
                    [] => "the layer's builder registers none; register it with \
                           .quota_lookup(name, QuotaLookup::new(..))"
                        .to_owned(),
                    names => format!("the layer's builder registers {}", names.join(", ")),
                }
            );
            return Err(fail(named.span(), "quota_from", &message));
        };
        rule = rule.quota_from(lookup.clone());
    }
    if let Some(overridable) = pick(&doc.overridable, &defaults.overridable) {
        rule = rule.overridable(*overridable);
    }
    Ok(rule)
}
