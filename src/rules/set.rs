//! [`RuleSet`]: every rule of a layer and the routes it never limits, indexed by path.

use std::any::Any;
use std::collections::HashSet;

use http::request::Parts;

use super::index::RouteIndex;
use super::{CompiledRule, CompiledSkip, Cost};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::Header;

/// Every rule of a layer and the routes it never limits; swapped whole on reload.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuleSet {
    rules: Vec<CompiledRule>,
    skips: Vec<CompiledSkip>,
    rule_index: RouteIndex,
    skip_index: RouteIndex,
    /// Whether the set is one rule that every request meets as it is (see [`sole`](Self::sole)).
    sole: bool,
    /// Whether that rule also decides a request by one check and nothing after it (see
    /// [`plain`](Self::plain)).
    plain: bool,
    /// The plain rule's key, when it is a header: read from the request as it comes (see
    /// [`plain_by_header`](Self::plain_by_header)).
    plain_header: Option<Header>,
    /// Whether a rule limits requests in flight.
    in_flight: bool,
    /// Whether a rule prices requests by their response.
    priced: bool,
    /// Whether a rule limits requests in flight or prices them by their response: both need
    /// the asynchronous way, which a request decided at once never looks at otherwise.
    held: bool,
}

impl RuleSet {
    /// The rules and skips, in order; rule names must be unique (they name store keys).
    pub(crate) fn new(
        rules: Vec<CompiledRule>,
        skips: Vec<CompiledSkip>,
    ) -> Result<Self, ConfigError> {
        let mut names = HashSet::with_capacity(rules.len());
        if let Some(twice) = rules.iter().find(|r| !names.insert(r.policy.name())) {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                format!(
                    "two rules are named {:?}: rule names must be unique",
                    twice.policy.name()
                ),
            ));
        }
        Ok(Self::indexed(rules, skips))
    }

    /// One rule and no skip: no name to repeat, so it cannot fail.
    pub(crate) fn one(rule: CompiledRule) -> Self {
        Self::indexed(vec![rule], Vec::new())
    }

    /// The set with its routes indexed.
    fn indexed(rules: Vec<CompiledRule>, skips: Vec<CompiledSkip>) -> Self {
        let rule_index = RouteIndex::new(rules.iter().map(|r| &r.route));
        let sole = match rules.as_slice() {
            [rule] => {
                skips.is_empty()
                    && rule_index.takes_all()
                    && matches!(rule.cost, Cost::One)
                    && !rule.has_client_quotas()
                    && rule.in_flight.is_none()
            }
            _ => false,
        };
        let plain = sole && rules.first().is_some_and(CompiledRule::is_plain);
        let plain_header = rules
            .first()
            .filter(|_| plain)
            .and_then(|rule| (rule.key.as_ref() as &dyn Any).downcast_ref::<Header>())
            .cloned();
        let in_flight = rules.iter().any(|r| r.in_flight.is_some());
        let priced = rules.iter().any(|r| r.priced.is_some());
        Self {
            rule_index,
            skip_index: RouteIndex::new(skips.iter().map(|s| &s.route)),
            rules,
            skips,
            sole,
            plain,
            plain_header,
            in_flight,
            priced,
            held: in_flight || priced,
        }
    }

    /// Whether a rule limits requests in flight: requests it may match take the way that
    /// holds slots; the others never look.
    #[inline]
    pub(crate) fn has_in_flight(&self) -> bool {
        self.in_flight
    }

    /// Whether a rule limits requests in flight or prices them by their response (see
    /// [`has_in_flight`](Self::has_in_flight), [`has_priced`](Self::has_priced)): one test for
    /// a request decided at once, whose way is the same as before either existed.
    #[inline]
    pub(crate) fn holds_after(&self) -> bool {
        self.held
    }

    /// Whether a rule prices requests by their response: requests it may match are settled
    /// after it; the others never look.
    #[inline]
    pub(crate) fn has_priced(&self) -> bool {
        self.priced
    }

    /// The rule, when the set is one rule for every request (any path and method, no skips)
    /// at cost 1, limiting a rate without quotas per client (tiers, lookups, overrides): the
    /// usual setup of a layer, whose requests need no route matched, quota found or cost read.
    #[inline]
    pub(crate) fn sole(&self) -> Option<&CompiledRule> {
        self.rules.first().filter(|_| self.sole)
    }

    /// The [`sole`](Self::sole) rule, when a request under it is one check and its answer:
    /// enforced, not delayed, nothing counted or priced after the response.
    #[inline]
    pub(crate) fn plain(&self) -> Option<&CompiledRule> {
        self.rules.first().filter(|_| self.plain)
    }

    /// The [`plain`](Self::plain) rule and its key, when the key is a [`Header`]: the layer
    /// reads it from the request's headers before it takes the request apart.
    #[inline]
    pub(crate) fn plain_by_header(&self) -> Option<(&CompiledRule, &Header)> {
        Some((self.rules.first()?, self.plain_header.as_ref()?))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::{HeaderName, Method};

    use super::*;
    use crate::rules::Route;
    use crate::{key, store::Policy, Algorithm, Quota};

    fn rule(name: &str) -> CompiledRule {
        let quota = Quota::per_minute(10).unwrap();
        let policy = Policy::new(name, quota, Algorithm::Gcra).unwrap();
        CompiledRule::everything(policy, quota, Arc::new(key::Global))
    }

    #[test]
    fn one_rule_for_every_request_at_cost_one_is_sole() {
        assert!(RuleSet::one(rule("a")).sole().is_some());
        let all_methods_all_paths = Route::new(Vec::new(), Some("/*")).unwrap();
        let mut any = rule("a");
        any.route = all_methods_all_paths;
        assert!(RuleSet::new(vec![any], Vec::new())
            .unwrap()
            .sole()
            .is_some());
    }

    #[test]
    fn anything_a_request_must_be_matched_or_read_for_is_not_sole() {
        let two = RuleSet::new(vec![rule("a"), rule("b")], Vec::new()).unwrap();
        assert!(two.sole().is_none());

        let mut login = rule("a");
        login.route = Route::new(Vec::new(), Some("/login")).unwrap();
        assert!(RuleSet::one(login).sole().is_none());

        let mut posts = rule("a");
        posts.route = Route::new(vec![Method::POST], None).unwrap();
        assert!(RuleSet::one(posts).sole().is_none());

        let health = CompiledSkip::route(Route::new(Vec::new(), Some("/health")).unwrap());
        let skipping = RuleSet::new(vec![rule("a")], vec![health]).unwrap();
        assert!(skipping.sole().is_none());

        let mut costly = rule("a");
        costly.cost = Cost::Header(HeaderName::from_static("x-cost"));
        assert!(RuleSet::one(costly).sole().is_none());

        let mut tiered = rule("a");
        tiered.quota_for = Some(Arc::new(|_: &str| None));
        assert!(RuleSet::one(tiered).sole().is_none());
    }
}
