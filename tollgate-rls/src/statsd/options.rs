//! What the push is told: where statsd is, how lines travel, and how they are named.

use std::time::Duration;

use super::mogrifier::Mogrifier;

/// Where and how statistics are pushed.
#[derive(Debug, Clone)]
pub(crate) struct Statsd {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// gostats's `STATSD_PROTOCOL`: TCP unless `udp`; DogStatsD is always UDP.
    pub(crate) protocol: Protocol,
    /// `USE_DOG_STATSD`: `EXTRA_TAGS` as DogStatsD tags (`|#k:v`) rather than name parts.
    pub(crate) dog: bool,
    /// `EXTRA_TAGS` (`k1:v1,k2:v2`), sorted by name as gostats sorts them, empty ones left out.
    pub(crate) extra_tags: Vec<(String, String)>,
    /// `STATS_FLUSH_INTERVAL`: how often the counters' growth is sent.
    pub(crate) flush_interval: Duration,
    /// DogStatsD's `USE_DOG_STATSD_MOGRIFIERS`, in their order.
    pub(crate) mogrifiers: Vec<Mogrifier>,
}

/// How statsd lines travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Tcp,
    Udp,
}
