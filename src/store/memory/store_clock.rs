//! [`StoreClock`]: the clock a memory store reads on every decision.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};

/// The store's clock: the system clock read without a call through a `dyn Clock` (every
/// decision reads it), or any other clock (tests' `ManualClock`, a user's) through one.
#[derive(Clone)]
pub(super) enum StoreClock {
    System,
    Other(Arc<dyn Clock>),
}

impl StoreClock {
    pub(super) fn new(clock: impl Clock) -> Self {
        if (&clock as &dyn Any).is::<SystemClock>() {
            Self::System
        } else {
            Self::Other(Arc::new(clock))
        }
    }

    /// Microseconds since the Unix epoch.
    #[inline]
    pub(super) fn now(&self) -> u64 {
        match self {
            Self::System => SystemClock.now(),
            Self::Other(clock) => clock.now(),
        }
    }

    /// The clock, as the `Clock` it is.
    pub(super) fn as_dyn(&self) -> &dyn Clock {
        match self {
            Self::System => &SystemClock,
            Self::Other(clock) => &**clock,
        }
    }
}

impl fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_dyn().fmt(f)
    }
}
