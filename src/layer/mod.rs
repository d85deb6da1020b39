//! [`RateLimitLayer`], the face of the crate: made with [`new`](RateLimitLayer::new) or a
//! [builder](RateLimitLayerBuilder), handled after that through its [`Control`].

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use tower_layer::Layer;

use crate::engine::Engine;
use crate::error::ConfigError;
use crate::key::KeyExtractor;
use crate::limiter::Limiter;
use crate::quota::{Policy, Quota};
use crate::rules::{CompiledRule, RuleSet, RuleSource};
use crate::service::RateLimit;

mod builder;
mod checked;
mod control;
mod skip;

pub use builder::RateLimitLayerBuilder;
pub use checked::Checked;
pub use control::Control;
pub use skip::Skip;

/// The policy name used when none is given; it appears in store keys and headers.
const DEFAULT_POLICY_NAME: &str = "default";

/// Rate-limits the wrapped service: each request is keyed, checked against a store, and
/// either passed on (with rate-limit headers) or answered with 429.
///
/// Cheap to clone (one `Arc`): clones share the limits, the store and the rules.
///
/// ```
/// use axum::{routing::get, Router};
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(Quota::per_minute(100)?, key::PeerIp::default()));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use]
#[derive(Clone)]
pub struct RateLimitLayer {
    limiter: Arc<Limiter>,
}

impl RateLimitLayer {
    /// A layer with the in-memory store, GCRA, and the given quota and key; every other
    /// setting at its default.
    ///
    /// It cannot fail: a [`Quota`] is valid by construction (`Quota::per_second(0)` is
    /// already a [`ConfigError`]), and GCRA takes any quota.
    pub fn new(quota: Quota, key: impl KeyExtractor) -> Self {
        let key: Arc<dyn KeyExtractor> = Arc::new(key);
        let policy = Policy::gcra(DEFAULT_POLICY_NAME, quota);
        let rule = CompiledRule::everything(policy, quota, key);
        let rules = RuleSource::fixed(RuleSet::one(rule));
        Self::builder().assemble(Engine::builder().wrap(), rules, None)
    }

    /// A layer with the in-memory store and the rules in a TOML file, reloaded when the file
    /// changes (see [the rules file](crate::guide::rules#the-rules-file) for its shape).
    ///
    /// ```no_run
    /// use tollgate::RateLimitLayer;
    ///
    /// let layer = RateLimitLayer::from_rules_file("rules.toml")?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn from_rules_file(path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        Self::builder().rules_file(path).build()
    }

    /// A builder for every setting; `build` checks them and returns a [`ConfigError`].
    pub fn builder() -> RateLimitLayerBuilder {
        RateLimitLayerBuilder::new(DEFAULT_POLICY_NAME)
    }

    /// A handle on this layer (cheap to clone, usable after the layer has gone into the
    /// app): its [`Stats`](crate::engine::Stats), the rules in force and their reload, and acting on
    /// one client (peek, reset, block, refund). See [`Control`].
    pub fn control(&self) -> Control {
        Control::new(Arc::clone(&self.limiter))
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .finish()
    }
}

impl<Svc> Layer<Svc> for RateLimitLayer {
    type Service = RateLimit<Svc>;

    fn layer(&self, inner: Svc) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.limiter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;

    #[test]
    fn the_default_policy_name_is_a_valid_one() {
        let quota = Quota::per_minute(100).unwrap();
        let checked = Policy::new(DEFAULT_POLICY_NAME, quota, Algorithm::Gcra).unwrap();
        assert_eq!(checked, Policy::gcra(DEFAULT_POLICY_NAME, quota));
    }
}
