//! [`RuleSet`]: every rule of a layer and the routes it never limits, indexed by path.

use std::collections::HashSet;

use http::request::Parts;

use super::index::RouteIndex;
use super::{CompiledRule, Skip};
use crate::error::{ConfigError, ConfigErrorKind};

/// Every rule of a layer and the routes it never limits; swapped whole on reload.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuleSet {
    rules: Vec<CompiledRule>,
    skips: Vec<Skip>,
    rule_index: RouteIndex,
    skip_index: RouteIndex,
}

impl RuleSet {
    /// The rules and skips, in order; rule names must be unique (they name store keys).
    pub(crate) fn new(rules: Vec<CompiledRule>, skips: Vec<Skip>) -> Result<Self, ConfigError> {
        let mut names = HashSet::with_capacity(rules.len());
        if let Some(twice) = rules.iter().find(|r| !names.insert(r.policy.name())) {
            return Err(ConfigError::of(
                ConfigErrorKind::Rule,
                format!(
                    "two rules are named {:?}: rule names must be unique",
                    twice.policy.name()
                ),
            ));
        }
        Ok(Self {
            rule_index: RouteIndex::new(rules.iter().map(|r| &r.route)),
            skip_index: RouteIndex::new(skips.iter().map(|s| &s.route)),
            rules,
            skips,
        })
    }

    /// One rule and no skip: no name to repeat, so it cannot fail.
    pub(crate) fn one(rule: CompiledRule) -> Self {
        Self {
            rule_index: RouteIndex::new([&rule.route]),
            skip_index: RouteIndex::new([]),
            rules: vec![rule],
            skips: Vec::new(),
        }
    }

    /// The rules, in order.
    pub(crate) fn rules(&self) -> &[CompiledRule] {
        &self.rules
    }

    /// Whether a skip takes the request: it is never limited.
    pub(crate) fn skips(&self, parts: &Parts) -> bool {
        !self.skips.is_empty()
            && self
                .skip_index
                .matching_by(|position| &self.skips[position].route, parts)
                .into_iter()
                .any(|position| self.skips[position].takes(parts))
    }

    /// The rules that apply to the request, in order, with their positions.
    pub(crate) fn matching(&self, parts: &Parts) -> impl Iterator<Item = (usize, &CompiledRule)> {
        self.rule_index
            .matching_by(|position| &self.rules[position].route, parts)
            .into_iter()
            .map(|position| (position, &self.rules[position]))
    }
}
