//! Rules: per-route, stacked limits with cost, tiers and modes, from code or a TOML file.
//!
//! A [`Rule`] is a named quota that applies to the requests its methods and path match. Every
//! matching rule must allow a request; a request denied by one rule consumes nothing from the
//! others.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::Method;

use crate::algorithm::Algorithm;
#[cfg(doc)]
use crate::error::ConfigError;
use crate::key::KeyExtractor;
use crate::quota::Quota;

mod compiled;
mod cost;
mod count_status;
mod delay;
mod file;
mod in_flight;
mod index;
mod lookup;
mod mode;
mod response_cost;
mod route;
mod rules_file;
mod set;
mod skip;
mod source;
pub use crate::lease::Lease;
pub(crate) use compiled::{header_item, CompiledRule, Setting};
pub(crate) use cost::{Cost, CostFn};
pub use count_status::StatusMatch;
pub(crate) use count_status::ALLOWED as COUNT_STATUS_ALLOWED;
pub(crate) use delay::DelayQueue;
pub(crate) use file::parse as parse_file;
pub(crate) use in_flight::InFlightRule;
pub(crate) use lookup::{Looked, NamedLookups};
pub use lookup::{Lookup, LookupError, QuotaLookup, QuotaResolver};
pub use mode::Mode;
pub(crate) use response_cost::Priced;
pub use response_cost::ResponseCost;
pub(crate) use route::{parse_methods, Route};
pub use rules_file::MAX_FILE_BYTES;
pub(crate) use set::RuleSet;
pub(crate) use skip::{CompiledSkip, SkipSpec};
pub(crate) use source::{InForce, RuleSource};

/// Picks the quota for a client key (tiers); `None` means the rule's own quota.
pub(crate) type TierFn = Arc<dyn Fn(&str) -> Option<Quota> + Send + Sync>;

/// A named limit for the requests its methods and path match.
///
/// Settings left out (algorithm, key) come from the layer's builder, then from the defaults
/// (GCRA, [`key::PeerIp`](crate::key::PeerIp)).
///
/// ```
/// use std::time::Duration;
/// use http::Method;
/// use tollgate::{key, rules::{Mode, Rule}, Quota, RateLimitLayer, Skip};
///
/// let layer = RateLimitLayer::builder()
///     .key(key::Header::new("x-api-key").or(key::PeerIp::default()))
///     .rule(Rule::new("login", Quota::per_minute(5)?).methods([Method::POST]).path("/login")
///         .key(key::PeerIp::default()))
///     .rule(Rule::new("api", "100/s; burst=200".parse()?).path("/api/*").cost_header("x-cost"))
///     .rule(Rule::new("api-daily", Quota::per_day(100_000)?).path("/api/*"))
///     .rule(Rule::new("export", Quota::per_second(2)?).path("/export")
///         .mode(Mode::Delay).max_delay(Duration::from_secs(2)))
///     .skip(Skip::new().path("/health"))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Rule {
    name: String,
    limit: Limit,
    in_flight_ttl: Option<Duration>,
    algorithm: Option<Algorithm>,
    key: Option<Arc<dyn KeyExtractor>>,
    methods: Vec<Method>,
    path: Option<String>,
    cost: CostSpec,
    max_cost: Option<u32>,
    mode: Mode,
    max_delay: Option<Duration>,
    quota_for: Option<TierFn>,
    quota_from: Option<QuotaLookup>,
    overridable: bool,
    block_for: Option<Duration>,
    count_status: Option<Vec<StatusMatch>>,
    lease: Option<Lease>,
    response_cost: Option<ResponseCost>,
}

/// What a rule limits: a rate, or the requests in flight.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Rate(Quota),
    /// At most this many of a client's requests at once.
    InFlight(u32),
}

/// A rule's cost as configured; checked by `compile`.
#[derive(Clone)]
enum CostSpec {
    One,
    Header(String),
    Fn(CostFn),
}

impl fmt::Debug for CostSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostSpec::One => f.write_str("One"),
            CostSpec::Header(h) => f.debug_tuple("Header").field(h).finish(),
            CostSpec::Fn(_) => f.write_str("Fn(..)"),
        }
    }
}

impl Rule {
    /// A rule named `name` (shown in `RateLimit-Policy`, part of store keys) allowing `quota`
    /// for every request, until narrowed by [`methods`](Self::methods) and
    /// [`path`](Self::path).
    pub fn new(name: impl Into<String>, quota: Quota) -> Self {
        Self::limiting(name.into(), Limit::Rate(quota))
    }

    /// A rule named `name` allowing at most `max` of one client's requests in flight at once
    /// (nginx's `limit_conn` per client), exactly across instances through a shared store,
    /// until narrowed by [`methods`](Self::methods) and [`path`](Self::path).
    ///
    /// A request takes a slot before the handler runs and gives it back when its response
    /// body ends or fails, or when it is dropped (the client hung up, a timeout, a handler
    /// that panicked): a guard holds it, so no slot is ever lost. One that finds every slot
    /// taken is refused with a 429 and `Retry-After: 1` (gRPC: RESOURCE_EXHAUSTED), or in
    /// [`Mode::Delay`] waits up to [`max_delay`](Self::max_delay) for a slot; in
    /// [`Mode::Shadow`] it goes through, counted and logged. `RateLimit-Policy` shows it as
    /// `"name";q=<max>;qu="concurrent-requests"`.
    ///
    /// Stacked with rate rules, a request must pass all of them: its slots are taken first,
    /// then its rates decided, so a request refused for lack of a slot is charged nothing,
    /// and one a rate refuses gives its slots back at once.
    ///
    /// In a shared store each slot is a lease of [`in_flight_ttl`](Self::in_flight_ttl)
    /// (default 30 s) that its instance renews while the request runs, so the slots of an
    /// instance that crashed come back after at most that long. A `max` of 0 is a
    /// [`ConfigError`] at `build`. Cost, tiers, quotas per client (`quota_from`,
    /// `overridable`), `block_for`, `count_status` and leases are for rates: an in-flight rule
    /// with one of them is a [`ConfigError`] too.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{key, rules::{Mode, Rule}, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .key(key::Header::new("x-api-key"))
    ///     // At most 4 inference requests of one key at once, on every instance together.
    ///     .rule(Rule::in_flight("inference", 4).path("/v1/completions"))
    ///     // A queue of exports: one at a time per key, each waiting up to 10 s for its turn.
    ///     .rule(Rule::in_flight("export", 1).path("/export").mode(Mode::Delay)
    ///         .max_delay(Duration::from_secs(10)).in_flight_ttl(Duration::from_secs(10)))
    ///     .rule(Rule::new("api", Quota::per_minute(600)?))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight(name: impl Into<String>, max: u32) -> Self {
        Self::limiting(name.into(), Limit::InFlight(max))
    }

    fn limiting(name: String, limit: Limit) -> Self {
        Self {
            name,
            limit,
            in_flight_ttl: None,
            algorithm: None,
            key: None,
            methods: Vec::new(),
            path: None,
            cost: CostSpec::One,
            max_cost: None,
            mode: Mode::Enforce,
            max_delay: None,
            quota_for: None,
            quota_from: None,
            overridable: false,
            block_for: None,
            count_status: None,
            lease: None,
            response_cost: None,
        }
    }

    /// The algorithm (default: the builder's, else GCRA).
    #[must_use]
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = Some(algorithm);
        self
    }

    /// How this rule keys requests (default: the builder's key, else the peer IP).
    #[must_use]
    pub fn key(mut self, key: impl KeyExtractor) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Only requests with one of these methods (default: any).
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = methods.into_iter().collect();
        self
    }

    /// Only requests whose path matches: exact (`"/login"`) or a prefix (`"/api/*"` matches
    /// `/api` and everything under `/api/`). Default: any path.
    #[must_use]
    pub fn path(mut self, pattern: impl Into<String>) -> Self {
        self.path = Some(pattern.into());
        self
    }

    /// Reads each request's cost from this header (a whole number ≥ 1; above
    /// [`max_cost`](Self::max_cost) it is clamped; anything else is a 400).
    #[must_use]
    pub fn cost_header(mut self, name: impl Into<String>) -> Self {
        self.cost = CostSpec::Header(name.into());
        self
    }

    /// Computes each request's cost (clamped to `1..=max_cost`).
    #[must_use]
    pub fn cost<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Parts) -> u32 + Send + Sync + 'static,
    {
        self.cost = CostSpec::Fn(Arc::new(cost));
        self
    }

    /// The most one request may cost (default: the rule's capacity, its burst or limit).
    #[must_use]
    pub fn max_cost(mut self, max: u32) -> Self {
        self.max_cost = Some(max);
        self
    }

    /// Enforce (default), shadow, or delay.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// The longest a request may wait in [`Mode::Delay`] (ignored in the other modes).
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = Some(max_delay);
        self
    }

    /// Picks a quota per client key (tiers: free vs paid). `None` keeps the rule's quota. The
    /// closure sees the key as extracted, before long keys are digested.
    ///
    /// ```
    /// use tollgate::{key, rules::Rule, Quota};
    ///
    /// let paid = Quota::per_minute(6000)?;
    /// let rule = Rule::new("api", Quota::per_minute(60)?)
    ///     .key(key::Header::new("x-api-key"))
    ///     .quota_for(move |key| key.starts_with("paid-").then_some(paid));
    /// # let _ = rule;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn quota_for<F>(mut self, tiers: F) -> Self
    where
        F: Fn(&str) -> Option<Quota> + Send + Sync + 'static,
    {
        self.quota_for = Some(Arc::new(tiers));
        self
    }

    /// Looks each client's quota up at run time with `lookup` (a plan in a database, a claim
    /// an auth layer attached to the request): see [`QuotaLookup`]. The lookup's answer is
    /// the client's quota, or none for a client this rule does not limit; a lookup that fails
    /// or times out is answered with the quota [`quota_for`](Self::quota_for) gives, else the
    /// rule's own. A quota set for the client at run time
    /// ([`Control::set_quota`](crate::Control::set_quota)) comes first: the rule is
    /// [`overridable`](Self::overridable).
    ///
    /// A client whose quota changes keeps what it has used: the requests it made under the
    /// old quota count against the new one (see the [rules guide](crate::guide::rules)).
    #[must_use]
    pub fn quota_from(mut self, lookup: QuotaLookup) -> Self {
        self.quota_from = Some(lookup);
        self.overridable = true;
        self
    }

    /// Whether a quota set for a client at run time
    /// ([`Control::set_quota`](crate::Control::set_quota)) decides its requests under this
    /// rule (default false; true with [`quota_from`](Self::quota_from)). Each instance reads
    /// a client's override from the store at most every
    /// [`OVERRIDE_TTL`](crate::engine::OVERRIDE_TTL), so a change reaches every instance
    /// within a second; it costs that read per active client, so rules that never need one
    /// leave it off.
    #[must_use]
    pub fn overridable(mut self, overridable: bool) -> Self {
        self.overridable = overridable;
        self
    }

    /// Once this rule denies a client, keeps denying it for `duration`, even if its quota
    /// refills meanwhile; `Retry-After` tells the rest of the block, and the client starts
    /// afresh after it (see [`Policy::block_for`](crate::store::Policy::block_for)). The block lives in the store, next to the
    /// client's state, so on Redis every instance sees it. Under stacked limits only the
    /// denying rule blocks. A shadow rule never blocks (its denials let requests through), and
    /// delay mode refuses it: a queued client waits for its slot rather than being blocked.
    /// At most a year.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{rules::Rule, Quota};
    ///
    /// let login = Rule::new("login", Quota::per_minute(5)?)
    ///     .path("/login")
    ///     .block_for(Duration::from_secs(15 * 60));
    /// # let _ = login;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn block_for(mut self, duration: Duration) -> Self {
        self.block_for = Some(duration);
        self
    }

    /// Counts only the requests whose response has one of these statuses, e.g. failed logins
    /// (`[401]`) or errors (`StatusMatch::class(5)`).
    ///
    /// Before the handler runs, the quota is peeked, consuming nothing (see
    /// [`Store::peek`](crate::store::Store::peek)): a client with nothing left gets the usual 429,
    /// and the handler is not called. The headers report that peek. Once the handler has
    /// answered with a listed status, the request is counted at its cost, before the response
    /// goes out, so a client that asks again always sees it; it is counted even if the client
    /// hangs up then. A request cancelled before the handler answers counts nothing.
    ///
    /// **The race:** requests that arrive together are all checked before any of them is
    /// counted, so a client sending `n` requests at once can get up to `n − 1` more through
    /// than its quota (each is counted afterwards, so the client then waits for all of them).
    /// Pair it with a plain rule on the same route when bursts matter.
    ///
    /// It reads the HTTP status: a gRPC failure is an HTTP 200 with its `grpc-status` in the
    /// trailers, so list codes for HTTP routes.
    ///
    /// Not allowed in [`Mode::Delay`], which takes a request's slot before the handler runs.
    /// An empty list, or a code or class HTTP has not (`99`, `6xx`), is a [`ConfigError`].
    ///
    /// ```
    /// use http::Method;
    /// use tollgate::{key, rules::{Rule, StatusMatch}, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .rule(Rule::new("signin", Quota::per_minute(3)?).methods([Method::POST])
    ///         .path("/signin").key(key::PeerIp::default()).count_status([401, 403]))
    ///     .rule(Rule::new("errors", Quota::per_minute(10)?).path("/api/*")
    ///         .count_status([StatusMatch::class(5)]))
    ///     .build()?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn count_status<T: Into<StatusMatch>>(
        mut self,
        statuses: impl IntoIterator<Item = T>,
    ) -> Self {
        self.count_status = Some(statuses.into_iter().map(Into::into).collect());
        self
    }

    /// Leases this rule's quota to each instance in batches, for a hot key (a global limit,
    /// one big customer): see [`Lease`]. Never admits
    /// more than the quota; may admit a little less. Works with the bucket algorithms and the
    /// fixed windows; the sliding windows and delay mode refuse it with a [`ConfigError`].
    ///
    /// ```
    /// use tollgate::{key, Quota, RateLimitLayer, rules::{Rule, Lease}};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .rule(Rule::new("global", Quota::per_second(20_000)?).key(key::Global).lease(Lease::Auto))
    ///     .build()?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn lease(mut self, lease: Lease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long a slot of this [in-flight rule](Self::in_flight) lives in a shared store
    /// unless its instance renews it (default 30 s, from 100 ms to 24 h): how long the slots
    /// of an instance that crashed stay taken. Renewal takes one store call every third of it
    /// for all the slots an instance holds. A [`ConfigError`] at `build` on a rate rule.
    #[must_use]
    pub fn in_flight_ttl(mut self, ttl: Duration) -> Self {
        self.in_flight_ttl = Some(ttl);
        self
    }

    /// Prices each request by its response (tokens of an AI completion, rows of a report):
    /// a request reserves its estimate at admission and is admitted only while the quota has
    /// room for it; once the response tells the real cost, the difference is charged or
    /// given back, in one store call. See [`ResponseCost`] for where the cost and the
    /// estimate come from, and the [guide](crate::guide::response_costs) for how far past
    /// its quota a client may go (charged while over, at most the requests in flight times
    /// `max_cost`).
    ///
    /// A response whose head has the cost settles before it is sent, and its rate-limit
    /// headers report what is left after it; a streamed one settles when its body ends (its
    /// trailers get the headers too), and one that never tells (an error, a body dropped or
    /// failed) settles at its estimate, or at zero with
    /// [`unknown_at_zero`](ResponseCost::unknown_at_zero).
    ///
    /// The estimate replaces [`cost`](Self::cost) and [`cost_header`](Self::cost_header), and
    /// delay mode, [`block_for`](Self::block_for), [`count_status`](Self::count_status) and
    /// [`lease`](Self::lease) do not go with it: a [`ConfigError`] at `build`.
    ///
    /// ```
    /// use tollgate::{key, rules::{ResponseCost, Rule}, Algorithm, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .key(key::Header::new("x-api-key"))
    ///     .rule(Rule::new("tokens", Quota::per_minute(10_000)?)
    ///         .algorithm(Algorithm::FixedWindow)
    ///         .path("/v1/complete")
    ///         .cost_from_response(ResponseCost::header("x-usage-tokens")
    ///             .estimate_header("x-estimated-tokens").estimate(100)))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn cost_from_response(mut self, cost: ResponseCost) -> Self {
        self.response_cost = Some(cost);
        self
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("limit", &self.limit)
            .field("in_flight_ttl", &self.in_flight_ttl)
            .field("algorithm", &self.algorithm)
            .field("key", &self.key.as_ref().map(|k| k.describe()))
            .field("methods", &self.methods)
            .field("path", &self.path)
            .field("cost", &self.cost)
            .field("max_cost", &self.max_cost)
            .field("mode", &self.mode)
            .field("max_delay", &self.max_delay)
            .field("block_for", &self.block_for)
            .field("count_status", &self.count_status)
            .field("lease", &self.lease)
            .field("quota_from", &self.quota_from)
            .field("overridable", &self.overridable)
            .field("response_cost", &self.response_cost)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ConfigError, ConfigErrorKind};
    use crate::key;

    fn compile(rule: Rule) -> Result<CompiledRule, ConfigError> {
        let default_key: Arc<dyn KeyExtractor> = Arc::new(key::Global);
        rule.compile(&default_key, Algorithm::Gcra)
    }

    #[test]
    fn a_lease_is_carried_by_the_policy_and_refused_where_it_cannot_be_exact() {
        let rule = Rule::new("g", Quota::per_second(100).unwrap()).lease(Lease::Auto);
        assert_eq!(compile(rule).unwrap().policy.lease(), Some(Lease::Auto));
        let e = compile(
            Rule::new("s", Quota::per_second(100).unwrap())
                .algorithm(Algorithm::SlidingWindowLog)
                .lease(Lease::tokens(5)),
        )
        .unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::Rule);
        assert!(
            e.to_string()
                .starts_with("rule \"s\": lease does not work with sliding_window_log"),
            "{e}"
        );
        let e = compile(
            Rule::new("d", Quota::per_second(100).unwrap())
                .mode(Mode::Delay)
                .lease(Lease::Auto),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("lease does not work in delay mode"),
            "{e}"
        );
    }

    #[test]
    fn a_tier_keeps_the_rules_lease() {
        let rule = Rule::new("t", Quota::per_second(100).unwrap()).lease(Lease::tokens(5));
        let compiled = compile(rule).unwrap();
        let tier = compiled
            .policy_for(Quota::per_second(1_000).unwrap())
            .unwrap();
        assert_eq!(tier.lease(), Some(Lease::tokens(5)));
    }
}
