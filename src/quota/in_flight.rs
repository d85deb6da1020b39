//! [`InFlight`]: a limit on one client's requests in flight, and how long a slot lives in a
//! shared store unless its instance renews it.

use std::sync::Arc;
use std::time::Duration;

use super::check_policy_name;
use crate::error::{ConfigError, ConfigErrorKind};

/// A named limit on requests in flight: at most `max` of one client's requests running at
/// once, each holding a slot from before the handler runs until its response body ends (or
/// the request is cancelled). What the stores keep for a rule made by
/// [`Rule::in_flight`](crate::rules::Rule::in_flight), as a [`Policy`](super::Policy) is for
/// a rate.
///
/// In a shared store (Redis, memcached, a state-backed store) a slot is a lease of
/// [`ttl`](Self::ttl) (default 30 s): the instance that holds it renews it every third of that,
/// so a slot of a running request never expires, and the slots of an instance that crashed come
/// back once their leases run out. The memory store needs no lease: its slots live and die
/// with the process.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::InFlight;
///
/// let gpu = InFlight::new("gpu", 4)?.with_ttl(Duration::from_secs(10))?;
/// assert_eq!((gpu.name(), gpu.max(), gpu.ttl()), ("gpu", 4, Duration::from_secs(10)));
/// assert!(InFlight::new("gpu", 0).is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    name: Arc<str>,
    max: u32,
    ttl: Duration,
}

impl InFlight {
    /// How long a slot lives in a shared store unless renewed, unless
    /// [`with_ttl`](Self::with_ttl) says otherwise.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// The shortest time to live: a slot is renewed every third of it, one store call each time.
    pub const MIN_TTL: Duration = Duration::from_millis(100);
    /// The longest time to live: how long a crashed instance's slots may stay taken.
    pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

    /// At most `max` requests of one client in flight under the name `name` (1–64 ASCII
    /// letters, digits, `-`, `_` or `.`: it is part of store keys and headers).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for a `max` of 0 or a name that cannot be written in a store key.
    pub fn new(name: impl Into<Arc<str>>, max: u32) -> Result<Self, ConfigError> {
        let name = name.into();
        check_policy_name(&name)?;
        if max == 0 {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                format!("in_flight of {name:?} must be at least 1 (the requests running at once)"),
            ));
        }
        Ok(Self {
            name,
            max,
            ttl: Self::DEFAULT_TTL,
        })
    }

    /// The same limit, its slots living `ttl` in a shared store unless renewed: how long the
    /// slots of an instance that crashed stay taken.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for a `ttl` outside [`MIN_TTL`](Self::MIN_TTL) to
    /// [`MAX_TTL`](Self::MAX_TTL).
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Self, ConfigError> {
        if !(Self::MIN_TTL..=Self::MAX_TTL).contains(&ttl) {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Rule,
                format!(
                    "in_flight_ttl {ttl:?} is out of range: use from 100ms to 24h, e.g. \"30s\""
                ),
            ));
        }
        self.ttl = ttl;
        Ok(self)
    }

    /// The name, as used in store keys and headers.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many requests of one client may be in flight at once.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// How long a slot lives in a shared store unless its instance renews it.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// [`ttl`](Self::ttl) in µs, as the stores compute with it.
    pub(crate) fn ttl_us(&self) -> u64 {
        u64::try_from(self.ttl.as_micros()).unwrap_or(u64::MAX)
    }

    /// The name, shared (a metrics label without a copy).
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }
}
