//! [`Quota`] (how many requests per period) and [`Policy`] (a named quota with an algorithm).

use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::{Algorithm, Params};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::lease::Lease;
use crate::telemetry::{Metered, RequestKeys};

mod in_flight;
mod name;
mod parse;
mod stored;
pub use in_flight::InFlight;
pub(crate) use name::check_policy_name;
pub(crate) use parse::parse_period;

/// The shortest period a quota may have.
const MIN_PERIOD: Duration = Duration::from_micros(50);
/// The longest time a full bucket may take to drain (100 years in µs): keeps every value the
/// Lua scripts compute below 2^53, where Lua's doubles are exact.
const MAX_BUCKET_SPAN_US: u64 = 100 * 365 * 24 * 3600 * 1_000_000;
/// The longest period a quota may have (365 days).
const MAX_PERIOD: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// `limit` requests per `period`, with an optional `burst` (bucket capacity, defaults to `limit`).
///
/// `Quota::per_second(10)?` means ten requests per second. A `Quota` is always valid: the
/// constructors check the limit (at least 1), the burst (at least 1) and the period (from 50 µs
/// to 365 days, at most one request per µs), and return a [`ConfigError`] that says what is
/// wrong, so a zero quota cannot be written and nothing using one can fail on it later.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ConfigErrorKind, Quota};
///
/// let q: Quota = "10/s; burst=20".parse()?;
/// assert_eq!(q, Quota::per_second(10)?.burst(20)?);
/// assert_eq!("5/10s".parse::<Quota>()?, Quota::new(5, Duration::from_secs(10))?);
///
/// // A zero limit is an error where the quota is made, not a panic later.
/// let zero = Quota::per_second(0).unwrap_err();
/// assert_eq!(zero.kind(), ConfigErrorKind::Quota);
/// assert_eq!(zero.to_string(), "invalid quota \"0/1s\": limit must be at least 1");
/// assert!("0/min".parse::<Quota>().is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u32,
    period: Duration,
    burst: Option<u32>,
}

impl Quota {
    /// `limit` requests per `period`.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] of kind [`Quota`](ConfigErrorKind::Quota) when `limit` is 0, the
    /// period is shorter than 50 µs or longer than 365 days, or `limit` is more than one
    /// request per microsecond of it.
    pub fn new(limit: u32, period: Duration) -> Result<Self, ConfigError> {
        let quota = Self {
            limit,
            period,
            burst: None,
        };
        quota.check()?;
        Ok(quota)
    }

    /// `limit` requests per `period`, with `burst` if set, at any rate: more than one request
    /// per microsecond is accepted (the reference's YAML takes any `u32` per any unit). The
    /// window algorithms count such a quota exactly; the bucket algorithms space requests
    /// `ceil(P / L)` µs apart, at least 1 µs, so past the burst they admit one per
    /// microsecond. Every other check of [`new`](Self::new) and [`burst`](Self::burst) holds.
    /// For configuration written for another limiter, such as Envoy's (`tollgate-rls`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// assert!(Quota::new(2_000_000, Duration::from_secs(1)).is_err());
    /// let quota = Quota::any_rate(2_000_000, Duration::from_secs(1), None)?;
    /// assert_eq!(quota.limit(), 2_000_000);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn any_rate(limit: u32, period: Duration, burst: Option<u32>) -> Result<Self, ConfigError> {
        let quota = Self {
            limit,
            period,
            burst,
        };
        quota.check_ranges()?;
        Ok(quota)
    }

    /// `limit` requests per second; see [`new`](Self::new) for the errors.
    pub fn per_second(limit: u32) -> Result<Self, ConfigError> {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` requests per minute; see [`new`](Self::new) for the errors.
    pub fn per_minute(limit: u32) -> Result<Self, ConfigError> {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` requests per hour; see [`new`](Self::new) for the errors.
    pub fn per_hour(limit: u32) -> Result<Self, ConfigError> {
        Self::new(limit, Duration::from_secs(60 * 60))
    }

    /// `limit` requests per day; see [`new`](Self::new) for the errors.
    pub fn per_day(limit: u32) -> Result<Self, ConfigError> {
        Self::new(limit, Duration::from_secs(24 * 60 * 60))
    }

    /// The same quota letting up to `burst` requests through at once (bucket algorithms only;
    /// window algorithms reject a burst that differs from the limit).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] of kind [`Quota`](ConfigErrorKind::Quota) when `burst` is 0.
    pub fn burst(mut self, burst: u32) -> Result<Self, ConfigError> {
        self.burst = Some(burst);
        self.check()?;
        Ok(self)
    }

    /// Requests per period.
    pub const fn limit(&self) -> u32 {
        self.limit
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The bucket capacity: the burst if set, else the limit.
    pub const fn capacity(&self) -> u32 {
        match self.burst {
            Some(b) => b,
            None => self.limit,
        }
    }

    /// The burst as set, if any.
    pub const fn burst_setting(&self) -> Option<u32> {
        self.burst
    }

    /// The quota in the integer microseconds `algorithm` computes with.
    pub(crate) fn params(&self, algorithm: Algorithm) -> Params {
        Params::new(self.limit, self.period, self.capacity(), algorithm)
    }

    /// Checks the quota against the allowed ranges: every constructor does, so that no invalid
    /// quota exists.
    fn check(&self) -> Result<(), ConfigError> {
        self.check_ranges()?;
        let period_us = self.period.as_micros();
        if u128::from(self.limit) > period_us {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Quota,
                format!(
                    "invalid quota {self}: {} requests in {period_us}µs is more than one per \
                     microsecond, the finest rate supported",
                    self.limit
                ),
            ));
        }
        Ok(())
    }

    /// Every check of [`check`](Self::check) but the rate's.
    fn check_ranges(&self) -> Result<(), ConfigError> {
        let err = |what: String| {
            Err(ConfigError::with_kind(
                ConfigErrorKind::Quota,
                format!("invalid quota {self}: {what}"),
            ))
        };
        if self.limit == 0 {
            return err("limit must be at least 1".into());
        }
        if self.burst == Some(0) {
            return err("burst must be at least 1".into());
        }
        if self.period < MIN_PERIOD {
            return err(format!(
                "period {:?} is shorter than the minimum of 50µs",
                self.period
            ));
        }
        if self.period > MAX_PERIOD {
            return err(format!(
                "period {:?} is longer than the maximum of 365 days",
                self.period
            ));
        }
        let period_us = self.period.as_micros();
        // The bucket algorithms space requests `ceil(P / L)` apart: a full bucket must drain
        // within MAX_BUCKET_SPAN_US, or the scripts' numbers would leave Lua's exact range.
        let interval = period_us.div_ceil(u128::from(self.limit));
        if u128::from(self.capacity()) * interval > u128::from(MAX_BUCKET_SPAN_US) {
            return err(format!(
                "a burst of {} at one request per {interval}µs spans more than 100 years; use \
                 a smaller burst or a shorter period",
                self.capacity()
            ));
        }
        Ok(())
    }
}

/// A named quota with an algorithm: what the layer asks a store to enforce.
///
/// The name is part of every store key and of the `RateLimit-Policy` header, so two policies
/// with different names never share state.
///
/// ```
/// use tollgate::{Algorithm, Quota, store::Policy};
///
/// let policy = Policy::new("api", Quota::per_minute(100)?, Algorithm::SlidingWindow)?;
/// assert_eq!(policy.name(), "api");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    name: Arc<str>,
    quota: Quota,
    algorithm: Algorithm,
    params: Params,
    /// How long a client denied under this policy stays blocked, in µs (0: not at all).
    block_for_us: u64,
    /// How instances lease this policy's quota, if they do (see [`Lease`]).
    lease: Option<Lease>,
    /// Whether its counts are plain counters at the client key itself (see
    /// [`with_plain_counter`](Policy::with_plain_counter)).
    plain_counter: bool,
    /// Its keys of `tollgate_requests_total`, made once (see `crate::telemetry`).
    request_keys: RequestKeys,
}

impl Policy {
    /// Checks the name and the quota's fit with the algorithm, and builds the policy.
    ///
    /// The name must be 1–64 bytes of ASCII letters, digits, `-`, `_` or `.`, because it is
    /// written into store keys and response headers; a burst other than the limit needs an
    /// algorithm that has one (`gcra`, `token_bucket`, `leaky_bucket`).
    pub fn new(
        name: impl Into<Arc<str>>,
        quota: Quota,
        algorithm: Algorithm,
    ) -> Result<Self, ConfigError> {
        let name = name.into();
        check_policy_name(&name)?;
        if quota.burst_setting().is_some_and(|b| b != quota.limit()) && !algorithm.uses_burst() {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Quota,
                format!(
                    "burst is not used by {algorithm} (only gcra, token_bucket and leaky_bucket \
                     have a burst); remove it or pick one of those"
                ),
            ));
        }
        Ok(Self::unchecked(name, quota, algorithm))
    }

    /// The GCRA policy named `name` (a valid name, checked by a test): GCRA takes every
    /// [`Quota`], so this cannot fail. What `RateLimitLayer::new` limits by.
    pub(crate) fn gcra(name: &'static str, quota: Quota) -> Self {
        Self::unchecked(name.into(), quota, Algorithm::Gcra)
    }

    /// The policy, its name and its quota's fit with the algorithm checked by the caller.
    fn unchecked(name: Arc<str>, quota: Quota, algorithm: Algorithm) -> Self {
        Self {
            params: quota.params(algorithm),
            name,
            quota,
            algorithm,
            block_for_us: 0,
            lease: None,
            plain_counter: false,
            request_keys: RequestKeys::default(),
        }
    }

    /// Blocks a client for `duration` once a blocking check denies it: every request is then
    /// denied (with `remaining` 0 and `Retry-After` the rest of the block) until the block
    /// ends, even if the quota refills meanwhile, and the client starts afresh after it. The
    /// store sets the block in the same atomic call that denies, so on Redis every instance
    /// sees it. A denial that no wait could turn into an allow (a cost above the capacity)
    /// blocks nothing, and a denial by a block does not make it longer. Zero turns it off.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Quota, store::Policy};
    ///
    /// let policy = Policy::new("login", Quota::per_minute(5)?, Algorithm::Gcra)?
    ///     .with_block_for(Duration::from_secs(600));
    /// assert_eq!(policy.block_for(), Some(Duration::from_secs(600)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// A [plain counter](Self::with_plain_counter) keeps nothing but its count: it is not
    /// blocked, and this leaves it as it is.
    #[must_use]
    pub fn with_block_for(mut self, duration: Duration) -> Self {
        if self.plain_counter {
            return self;
        }
        self.block_for_us = u64::try_from(duration.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_BUCKET_SPAN_US);
        self
    }

    /// How long a denied client is blocked (see [`with_block_for`](Self::with_block_for)), if
    /// at all.
    pub fn block_for(&self) -> Option<Duration> {
        (self.block_for_us > 0).then(|| Duration::from_micros(self.block_for_us))
    }

    /// [`block_for`](Self::block_for) in µs, 0 for none: what the stores compute with.
    pub(crate) fn block_for_us(&self) -> u64 {
        self.block_for_us
    }

    /// The policy with its quota leased to instances in batches (see [`Lease`]): the store
    /// is asked for up to that many units at once, and the instance decides locally from them.
    /// The policy carries the setting because a store sees only (key, policy, cost).
    ///
    /// Fails for the sliding windows (which cannot take unused units back exactly), for a
    /// lease of more tokens than the quota's capacity, and for a policy that
    /// [blocks](Self::block_for) (set `with_block_for` after this and it is ignored by leased
    /// keys).
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota, rules::Lease, store::Policy};
    ///
    /// let policy = Policy::new("global", Quota::per_second(20_000)?, Algorithm::Gcra)?
    ///     .with_lease(Lease::Auto)?;
    /// assert_eq!(policy.lease(), Some(Lease::Auto));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn with_lease(mut self, lease: Lease) -> Result<Self, ConfigError> {
        if self.plain_counter {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                "lease does not work with a plain counter, which every instance adds to in the \
                 store; remove one of them",
            ));
        }
        lease.validate(
            self.algorithm,
            u32::try_from(self.params.burst).unwrap_or(u32::MAX),
        )?;
        if self.block_for_us > 0 {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                "lease does not work with block_for: a leased key is decided locally, where no \
                 block is set; remove one of them",
            ));
        }
        self.lease = Some(lease);
        Ok(self)
    }

    /// How this policy's quota is leased, if it is.
    pub fn lease(&self) -> Option<Lease> {
        self.lease
    }

    /// The policy with its counts kept as envoyproxy/ratelimit (Envoy's reference rate limit
    /// service) keeps them, so that it and tollgate share each count: a plain counter per
    /// window at `<client key><start of the window, in Unix seconds>`, the client key used
    /// exactly as given (a store adds no prefix of its own: whoever builds the key chooses
    /// its namespace), added to by each request's cost and kept for one period.
    ///
    /// On Redis, charging every hit ([`Charging::EveryHit`](crate::engine::Charging)), a
    /// request's plain counters are `INCRBY` + `EXPIRE` each, in one pipeline, the
    /// reference's commands; with [`StopWhenOverLimit`](crate::engine::Charging) a `GET` of
    /// each first, in a pipeline of its own, as the reference reads them. Other decisions
    /// (a refused request consuming nothing, plain counters beside other algorithms) run in
    /// the store's script, on the same keys. On memcached each is an increment that creates
    /// the counter if it has none. The window is the store's clock's (the instance's, as the
    /// reference's is, never Redis `TIME`). Every other store decides it as the
    /// [`FixedWindow`](Algorithm::FixedWindow) it is: the same decisions for the same history.
    ///
    /// Fails unless the algorithm is the fixed window and the period whole seconds, and for
    /// a policy that leases or blocks. A plain counter cannot be
    /// [blocked](crate::store::Store::block) on Redis or memcached (its value is only a count).
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota, store::Policy};
    ///
    /// let policy = Policy::new("rls.60s", Quota::per_minute(100)?, Algorithm::FixedWindow)?
    ///     .with_plain_counter()?;
    /// assert!(policy.plain_counter());
    /// assert!(Policy::new("p", Quota::per_minute(1)?, Algorithm::Gcra)?.with_plain_counter().is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn with_plain_counter(mut self) -> Result<Self, ConfigError> {
        let whole_seconds = self.params.period.is_multiple_of(1_000_000);
        let why = match () {
            _ if self.algorithm != Algorithm::FixedWindow => {
                format!("a plain counter is a fixed window, not {}", self.algorithm)
            }
            _ if !whole_seconds => "a plain counter's period is whole seconds".to_owned(),
            _ if self.lease.is_some() => "a plain counter is not leased".to_owned(),
            _ if self.block_for_us > 0 => "a plain counter is not blocked".to_owned(),
            _ => {
                self.plain_counter = true;
                return Ok(self);
            }
        };
        Err(ConfigError::with_kind(ConfigErrorKind::Quota, why))
    }

    /// Whether its counts are plain counters (see [`with_plain_counter`](Self::with_plain_counter)).
    pub fn plain_counter(&self) -> bool {
        self.plain_counter
    }

    /// The key of `client_key`'s plain counter in the window that holds `now` (µs): the client
    /// key, then the window's start in Unix seconds, as envoyproxy/ratelimit's
    /// `GenerateCacheKey` ends it (`(now / divider) * divider`). Only the shared stores keep
    /// plain counters apart from the state (memory decides them as the fixed window they are).
    #[cfg(any(feature = "memcached", feature = "redis"))]
    pub(crate) fn counter_key(&self, client_key: &str, now: u64) -> String {
        let period = self.params.period.max(1);
        let start = (now - now % period) / 1_000_000;
        let mut digits = itoa::Buffer::new();
        let start = digits.format(start);
        let mut key = String::with_capacity(client_key.len() + start.len());
        key.push_str(client_key);
        key.push_str(start);
        key
    }

    /// The policy's name, as used in store keys and headers.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, shared (a metrics label, a memory store's table, without a copy).
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// This policy counted in `tollgate_requests_total` with the keys of `rule` (of the same
    /// name: a rule's tier), so that a tier made for a request does not make its keys anew.
    #[must_use]
    pub(crate) fn counted_as(mut self, rule: &Policy) -> Self {
        if self.name == rule.name {
            self.request_keys = rule.request_keys.clone();
        }
        self
    }

    /// This policy (a client's quota under `rule`, of the same name) with its buckets' state
    /// kept in `rule`'s scale, marked when its own differs (see `algorithm::Scale`), so that
    /// a client whose quota changes keeps what it has used.
    #[must_use]
    pub(crate) fn kept_as(mut self, rule: &Policy) -> Self {
        self.params.home = rule.params.home;
        self
    }

    /// The quota.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The quota in the integer microseconds the algorithms compute with.
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }
}

impl Metered for Policy {
    fn rule(&self) -> &Arc<str> {
        &self.name
    }

    fn request_keys(&self) -> &RequestKeys {
        &self.request_keys
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Any `u32` per any unit is a quota (as Envoy's YAML writes them): a window counts it
    /// exactly, and the buckets space requests 1 µs apart at least, their burst kept.
    #[test]
    fn any_rate_takes_any_u32_per_any_unit() {
        for secs in [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000] {
            for n in [1_000_000_000, u32::MAX] {
                let quota = Quota::any_rate(n, Duration::from_secs(secs), None).unwrap();
                let params = quota.params(Algorithm::FixedWindow);
                assert_eq!(params.limit, u64::from(n), "{n} per {secs} s");
            }
        }
        let quota = Quota::any_rate(u32::MAX, Duration::from_secs(1), Some(7)).unwrap();
        let params = quota.params(Algorithm::Gcra);
        assert_eq!((params.interval, params.burst), (1, 7));
    }

    proptest! {
        #[test]
        fn parsing_any_text_never_panics(text in "\\PC*") {
            let _ = text.parse::<Quota>();
        }

        #[test]
        fn what_parses_is_valid_and_round_trips(
            text in "[0-9]{0,12} ?/ ?[0-9]{0,22} ?(us|µs|ms|s|sec|m|min|h|hours|d|day|x)?( ?; ?(burst|b)=[0-9]{0,11})?",
        ) {
            if let Ok(quota) = text.parse::<Quota>() {
                prop_assert!(quota.check().is_ok());
                let shown = quota.to_string();
                prop_assert_eq!(shown.trim_matches('"').parse::<Quota>(), Ok(quota));
            }
        }
    }

    #[test]
    fn parses_the_documented_forms() {
        let q = |s: &str| s.parse::<Quota>().unwrap();
        assert_eq!(q("100/min"), Quota::per_minute(100).unwrap());
        assert_eq!(q("5/10s"), Quota::new(5, Duration::from_secs(10)).unwrap());
        assert_eq!(
            q("10/s; burst=20"),
            Quota::per_second(10).unwrap().burst(20).unwrap()
        );
        assert_eq!(q("1000/day"), Quota::per_day(1000).unwrap());
        assert_eq!(
            q(" 3 / 2 hours ;burst=4 "),
            Quota::new(3, Duration::from_secs(7200))
                .unwrap()
                .burst(4)
                .unwrap()
        );
        assert_eq!(
            q("1/50us"),
            Quota::new(1, Duration::from_micros(50)).unwrap()
        );
        assert_eq!(
            q("2/250ms"),
            Quota::new(2, Duration::from_millis(250)).unwrap()
        );
    }

    #[test]
    fn rejects_bad_quotas_with_a_reason() {
        let e = |s: &str| s.parse::<Quota>().unwrap_err().to_string();
        assert!(
            e("0/min").contains("limit must be at least 1"),
            "{}",
            e("0/min")
        );
        assert!(e("10/fortnight").contains("unknown period unit"));
        assert!(e("10").contains("expected"));
        assert!(e("x/s").contains("whole number"));
        assert!(e("1/10us").contains("minimum of 50µs"));
        assert!(e("1/400day").contains("maximum of 365 days"));
        assert!(e("10/s; burst=0").contains("burst must be at least 1"));
        assert!(e("10/s; brust=3").contains("unknown option"));
        assert!(e("100/50us").contains("one per microsecond"));
        assert!(e("1/0s").contains("longer than zero"));
        assert!(e("1/99999999999999999999day").contains("too large"));
    }

    #[test]
    fn fractions_and_repeated_options_are_refused() {
        let e = |s: &str| s.parse::<Quota>().unwrap_err().to_string();
        assert_eq!(
            e("1/1.5s"),
            "invalid quota \"1/1.5s\": period \"1.5s\": fractions are not allowed; use a whole \
             number of a smaller unit (e.g. \"1500ms\" rather than \"1.5s\")"
        );
        assert!(e("3/0,5min").contains("fractions are not allowed"));
        assert!(e("1.5/s").contains("the limit must be a whole number"));
        assert_eq!(
            e("10/s; burst=20; burst=5"),
            "invalid quota \"10/s; burst=20; burst=5\": burst is given twice"
        );
        assert!(e("10/s;burst=1;burst=1").contains("burst is given twice"));
    }

    #[test]
    fn display_round_trips() {
        for q in [
            Quota::per_minute(100).unwrap(),
            Quota::per_second(10).unwrap().burst(20).unwrap(),
            Quota::new(1, Duration::from_micros(75)).unwrap(),
        ] {
            let shown = q.to_string();
            assert_eq!(shown.trim_matches('"').parse::<Quota>().unwrap(), q);
        }
    }

    #[test]
    fn policy_checks_name_and_burst() {
        assert!(Policy::new("a b", Quota::per_second(1).unwrap(), Algorithm::Gcra).is_err());
        assert!(Policy::new("", Quota::per_second(1).unwrap(), Algorithm::Gcra).is_err());
        let e = Policy::new(
            "w",
            Quota::per_second(1).unwrap().burst(5).unwrap(),
            Algorithm::FixedWindow,
        );
        assert!(e.unwrap_err().to_string().contains("burst is not used"));
        assert!(Policy::new(
            "b",
            Quota::per_second(1).unwrap().burst(5).unwrap(),
            Algorithm::TokenBucket
        )
        .is_ok());
        // What a policy once refused, its quota now refuses where it is made.
        assert!(Quota::per_second(0).is_err());
        let huge = Quota::per_day(1).unwrap().burst(40_000);
        assert!(huge.unwrap_err().to_string().contains("100 years"));
        assert!(Policy::new(
            "h",
            Quota::per_day(1).unwrap().burst(30_000).unwrap(),
            Algorithm::Gcra
        )
        .is_ok());
    }
}
