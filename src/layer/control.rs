//! [`Control`]: what can be read and done on a layer once it is built.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;

use super::checked::Checked;
use crate::decision::Decision;
use crate::engine::Stats;
use crate::error::{ConfigError, ControlError};
use crate::limiter::{Limiter, Verdict};
use crate::quota::Quota;

/// A handle on a built [`RateLimitLayer`](crate::RateLimitLayer), from
/// [`control`](crate::RateLimitLayer::control): its figures ([`stats`](Self::stats)), the rules
/// in force ([`rule_names`](Self::rule_names), [`reload_rules`](Self::reload_rules)), and one
/// client's state ([`peek`](Self::peek), [`reset`](Self::reset), [`block`](Self::block),
/// [`refund`](Self::refund)), e.g. for an admin endpoint.
///
/// Cheap to clone, and independent of the layer's place in the app: take it before the layer
/// goes into the router.
///
/// A client is named by a rule and its key as the rule's key extractor reads it (the IP
/// address as text, a header's value), sanitized as requests' keys are; a rule with quotas
/// per client uses the client's (its override, its lookup's answer, its tier; a lookup sees an
/// empty request head). On Redis every instance sees a reset, block or refund; this
/// instance's cache of denials forgets the client at once, and other instances' caches ask
/// the store again within 5 s.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{key, ControlError, Quota, RateLimitLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let layer = RateLimitLayer::builder()
///     .name("api")
///     .quota(Quota::per_minute(100)?)
///     .key(key::Header::new("x-api-key"))
///     .build()?;
/// let control = layer.control();
/// // What one more request of alice's would leave.
/// assert_eq!(control.peek("api", "alice").await?.remaining, 99);
/// control.block("api", "key-123", Duration::from_secs(600)).await?;
/// control.refund("api", "key-456", 1).await?;
/// control.reset("api", "key-123").await?;
/// assert!(matches!(
///     control.reset("nope", "key-123").await,
///     Err(ControlError::UnknownRule { .. })
/// ));
/// assert_eq!(control.stats().store_errors, 0);
/// assert_eq!(control.rule_names(), ["api"]);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Control {
    limiter: Arc<Limiter>,
}

impl Control {
    pub(super) fn new(limiter: Arc<Limiter>) -> Self {
        Self { limiter }
    }

    /// The layer's figures now.
    pub fn stats(&self) -> Stats {
        self.limiter.engine.stats()
    }

    /// Reads the rules file again now and swaps in its rules, without waiting for the file
    /// watcher (which looks every half second): e.g. on SIGHUP, or after writing the file
    /// from a deployment script. If the file cannot be read, is not a regular file (a named
    /// pipe, a device, a directory), is larger than [`rules::MAX_FILE_BYTES`], is not UTF-8,
    /// has no rule, or does not parse or validate, the rules in force stay and the error says
    /// why (with the file, line and column). A failure is also logged at WARN and counted in
    /// `tollgate_rules_reload_failures_total`, once for each distinct failure, as the
    /// watcher's are. Without a rules file it does nothing.
    ///
    /// It reads and parses on the calling thread, holding no lock while it reads, so a slow
    /// read elsewhere never holds it up; in async code with a large file, call it from
    /// `tokio::task::spawn_blocking`.
    ///
    /// [`rules::MAX_FILE_BYTES`]: crate::rules::MAX_FILE_BYTES
    ///
    /// ```no_run
    /// # #[cfg(unix)]
    /// # async fn run() -> Result<(), tollgate::ConfigError> {
    /// use tokio::signal::unix::{signal, SignalKind};
    /// use tollgate::RateLimitLayer;
    ///
    /// let layer = RateLimitLayer::from_rules_file("rules.toml")?;
    /// let control = layer.control();
    /// tokio::spawn(async move {
    ///     let Ok(mut hangups) = signal(SignalKind::hangup()) else { return };
    ///     while hangups.recv().await.is_some() {
    ///         match control.reload_rules() {
    ///             Ok(()) => tracing::info!("rules reloaded: {:?}", control.rule_names()),
    ///             Err(e) => tracing::error!("{e}; keeping the rules loaded before"),
    ///         }
    ///     }
    /// });
    /// // ... serve with `layer` ...
    /// # Ok(())
    /// # }
    /// ```
    pub fn reload_rules(&self) -> Result<(), ConfigError> {
        self.limiter.rules.reload()
    }

    /// The names of the rules in force (after the latest reload of a rules file).
    pub fn rule_names(&self) -> Vec<String> {
        let rules = self.limiter.rules.current();
        (rules.rules().iter())
            .map(|r| r.policy.name().to_owned())
            .collect()
    }

    /// What the client `key` has left under the rule named `rule`, consuming nothing: the
    /// decision a request of cost 1 would get now. The key is read as a request's would be:
    /// the raw key its extractor returns (e.g. the `x-api-key` value, or the IP as text),
    /// given to the rule's `quota_for` and then sanitized the same way.
    ///
    /// # Errors
    ///
    /// [`ControlError::UnknownRule`] for a rule that is not in force; [`ControlError::Store`]
    /// when the store cannot answer (with
    /// [`OnStoreError::FallbackToMemory`](crate::store::OnStoreError::FallbackToMemory), the
    /// fallback answers instead).
    pub async fn peek(&self, rule: &str, key: &str) -> Result<Decision, ControlError> {
        let (key, policy) = self.limiter.client(rule, key).await?;
        Ok(self.limiter.engine.peek(&key, &policy, 1).await?)
    }

    /// Forgets the state of client `key` under the rule named `rule`, and any block: its next
    /// request starts with a whole quota. Errors as for [`peek`](Self::peek).
    pub async fn reset(&self, rule: &str, key: &str) -> Result<(), ControlError> {
        let (key, policy) = self.limiter.client(rule, key).await?;
        Ok(self.limiter.engine.reset(&key, &policy).await?)
    }

    /// Denies every request of client `key` under the rule named `rule` for `duration` from
    /// now, with `Retry-After` the rest of the block; the client starts afresh after it. A
    /// zero `duration` is a [`reset`](Self::reset). Errors as for [`peek`](Self::peek).
    pub async fn block(
        &self,
        rule: &str,
        key: &str,
        duration: Duration,
    ) -> Result<(), ControlError> {
        let (key, policy) = self.limiter.client(rule, key).await?;
        Ok(self.limiter.engine.block(&key, &policy, duration).await?)
    }

    /// Gives `n` units back to client `key` under the rule named `rule`, as far as the rule's
    /// algorithm allows (e.g. for a request that turned out not to count): GCRA and the leaky
    /// bucket move the client's time back by `n` intervals (never before now), the token
    /// bucket adds `n` tokens (up to its capacity), the windows take `n` off the current
    /// window's count, the log drops its newest `n` entries. A blocked client stays blocked.
    ///
    /// # Errors
    ///
    /// As for [`peek`](Self::peek); a store of your own answers
    /// [`StoreError::Unsupported`](crate::store::StoreError::Unsupported).
    pub async fn refund(&self, rule: &str, key: &str, n: u32) -> Result<(), ControlError> {
        let (key, policy) = self.limiter.client(rule, key).await?;
        Ok(self.limiter.engine.refund(&key, &policy, n).await?)
    }

    /// Settles work of client `key` under the rule named `rule` that reserved `reserved`
    /// units (e.g. an estimate taken with [`check`](Self::check)) and cost `cost`, once that
    /// is known (tokens a job used): the difference is charged even past the quota, or given
    /// back, in one store call, as the layer settles a rule
    /// [priced by the response](crate::rules::Rule::cost_from_response). The decision of a
    /// charge; `None` when something was given back or nothing changed.
    ///
    /// # Errors
    ///
    /// As for [`refund`](Self::refund).
    pub async fn settle(
        &self,
        rule: &str,
        key: &str,
        reserved: u32,
        cost: u32,
    ) -> Result<Option<Decision>, ControlError> {
        let (key, policy) = self.limiter.client(rule, key).await?;
        Ok(self
            .limiter
            .engine
            .settle(&key, &policy, reserved, cost)
            .await?)
    }
}

/// Quotas set for one client at run time, seen by every instance on the store.
impl Control {
    /// Sets `quota` for the client `key` under the rule named `rule`, for `expires_after`
    /// (`None`: until [cleared](Self::clear_quota); zero clears it): its requests are decided
    /// by it, whatever the rule's lookup or tiers say. The quota is kept in the store, so
    /// every instance on it decides by it within a second (this one at once); on the memory
    /// store, only this instance. What the client has used counts against the new quota.
    ///
    /// The key is read as a request's would be (e.g. the `x-api-key` value), and sanitized
    /// the same way.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::rules::Rule;
    /// use tollgate::{key, Quota, RateLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let control = RateLimitLayer::builder()
    ///     .rule(Rule::new("api", "5/10s".parse()?).key(key::Header::new("x-api-key")).overridable(true))
    ///     .build_control()?;
    /// let big = "50/10s".parse()?;
    /// control.set_quota("api", "key-123", big, Some(Duration::from_secs(3600))).await?;
    /// assert_eq!(control.quota_override("api", "key-123").await?, Some(big));
    /// assert_eq!(control.peek("api", "key-123").await?.limit, 50);
    /// control.clear_quota("api", "key-123").await?;
    /// assert_eq!(control.peek("api", "key-123").await?.limit, 5);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ControlError::UnknownRule`] for a rule that is not in force,
    /// [`ControlError::NotOverridable`] for one that takes no quota set at run time,
    /// [`ControlError::Quota`] for a quota that does not fit the rule, and
    /// [`ControlError::Store`] when the store could not keep it (a store of your own that is
    /// not a [`StateBackedStore`](crate::store::StateBackedStore) keeps none:
    /// [`StoreError::Unsupported`](crate::store::StoreError::Unsupported)).
    pub async fn set_quota(
        &self,
        rule: &str,
        key: &str,
        quota: Quota,
        expires_after: Option<Duration>,
    ) -> Result<(), ControlError> {
        if expires_after.is_some_and(|d| d.is_zero()) {
            return self.clear_quota(rule, key).await;
        }
        let key = self.limiter.overridable(rule, key, Some(quota))?;
        let engine = &self.limiter.engine;
        Ok(engine.set_quota(rule, &key, quota, expires_after).await?)
    }

    /// Clears the quota set for the client `key` under the rule named `rule`: its requests
    /// are decided by the rule's lookup, tiers or quota again, on every instance within a
    /// second. Errors as for [`set_quota`](Self::set_quota).
    pub async fn clear_quota(&self, rule: &str, key: &str) -> Result<(), ControlError> {
        let key = self.limiter.overridable(rule, key, None)?;
        Ok(self.limiter.engine.clear_quota(rule, &key).await?)
    }

    /// The quota set for the client `key` under the rule named `rule`, as the store holds it
    /// now; `None` when none is set (or it expired). Errors as for
    /// [`set_quota`](Self::set_quota).
    pub async fn quota_override(
        &self,
        rule: &str,
        key: &str,
    ) -> Result<Option<Quota>, ControlError> {
        let key = self.limiter.overridable(rule, key, None)?;
        Ok(self.limiter.engine.read_quota(rule, &key).await?)
    }
}

/// The door: decisions for code outside Tower, with the layer's guarantees.
impl Control {
    /// Charges `cost` units to the client `key` under the rule named `rule` now, as a request
    /// of that client and cost would be charged by the layer: the same store call through
    /// the same cache of denials, leases, breaker and fallback, the same metrics, and the same
    /// headers and refusal in the [`Checked`] answer. Use it where the layer cannot see the
    /// key or the cost: a key read from a JSON body, each message of a WebSocket, a job.
    ///
    /// The key is read as a request's would be (the raw key, e.g. a user id; the client's own
    /// quota applies, its lookup seeing an empty request head; and it is sanitized the same
    /// way). A delay-mode rule waits here for the
    /// client's turn, as the layer would, and gives the turn back if this future is dropped.
    /// A rule with `count_status` is charged now (there is no response to count). A cost of
    /// 0 only looks. Under an [in-flight rule](crate::rules::Rule::in_flight) it takes one
    /// slot (whatever the cost), which the allowed [`Checked`] holds until it is dropped.
    ///
    /// # Errors
    ///
    /// [`ControlError::UnknownRule`] for a rule that is not in force. A store that cannot
    /// decide is not an error: it is answered by the layer's
    /// [`OnStoreError`](crate::store::OnStoreError), as a request would be.
    pub async fn check(&self, rule: &str, key: &str, cost: u32) -> Result<Checked, ControlError> {
        self.check_waiting(rule, key, cost, None).await
    }

    /// [`check`](Self::check), waiting up to `wait` for a slot under an in-flight rule.
    async fn check_waiting(
        &self,
        rule: &str,
        key: &str,
        cost: u32,
        wait: Option<Duration>,
    ) -> Result<Checked, ControlError> {
        let (decision, verdict) = self.limiter.check_client(rule, key, cost, wait).await?;
        Ok(match verdict {
            Verdict::Proceed(headers) => Checked::allowed(decision, header_map(headers)),
            Verdict::Later(later) => {
                let mut later = *later;
                // Held across the wait: dropped with this future, it gives the turn back.
                tokio::time::sleep(later.wait).await;
                later.give_back.keep();
                Checked::allowed(decision, header_map(later.headers)).holding(later.slots)
            }
            Verdict::Refuse(refusal) => {
                Checked::refused(decision, refusal.render(&HeaderMap::new()))
            }
        })
    }

    /// [`check`](Self::check), waiting for the cost to be allowed if that takes at most
    /// `max_wait`: a refused check whose `Retry-After` is within what is left of `max_wait`
    /// sleeps until then and checks again (a refused check consumes nothing, so waiting
    /// costs no quota). Answers the first allowed check, or the refused one whose wait would
    /// pass `max_wait` (at once, without waiting in vain), or the 503 of a store that cannot
    /// decide under [`OnStoreError::Deny`](crate::store::OnStoreError::Deny). Dropping the
    /// future gives up, with nothing charged.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{key, Quota, RateLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // An outbound API allows 20 calls a second, shared by every worker of this process.
    /// let control = RateLimitLayer::builder()
    ///     .name("partner_api")
    ///     .quota(Quota::per_second(20)?)
    ///     .key(key::Global)
    ///     .build_control()?;
    /// for _ in 0..25 {
    ///     let checked = control.acquire("partner_api", "all", 1, Duration::from_secs(1)).await?;
    ///     assert!(checked.is_allowed());
    ///     // ... call the partner ...
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`check`](Self::check).
    pub async fn acquire(
        &self,
        rule: &str,
        key: &str,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Checked, ControlError> {
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let checked = self.check_waiting(rule, key, cost, Some(left)).await?;
            let retry = checked.decision().and_then(|d| d.retry_after);
            let (false, Some(retry)) = (checked.is_allowed(), retry) else {
                return Ok(checked);
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if retry > left {
                return Ok(checked);
            }
            tokio::time::sleep(retry).await;
        }
    }
}

/// Rate-limit headers as a map of their own.
fn header_map(headers: crate::response::Headers) -> HeaderMap {
    let mut map = HeaderMap::new();
    headers.write_into(&mut map);
    map
}

impl fmt::Debug for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Control")
            .field("rules", &self.rule_names())
            .field("stats", &self.stats())
            .finish()
    }
}
