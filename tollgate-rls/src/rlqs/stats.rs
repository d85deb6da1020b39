//! RLQS statistics per domain: streams, buckets, reports, assignments and abandons; and per
//! bucket family (the limit a bucket meets, named as the configuration names it), quota
//! assigned against used. A domain is a label only when the configuration has it (else
//! `unknown`), and a family is a limit of the configuration, so clients cannot grow the
//! series, as `ShouldRateLimit`'s statistics bound them.

use metrics::{Counter, Gauge};

use crate::service::RateLimitService;

/// The series of one stream's domain, looked up once when the stream names it.
#[derive(Debug)]
pub(crate) struct DomainStats {
    streams: Gauge,
    buckets: Gauge,
    reports: Counter,
    assignments: Counter,
    abandons: Counter,
    /// Buckets this stream added to the gauge.
    held: std::sync::atomic::AtomicUsize,
}

impl DomainStats {
    /// The series of `domain` (`unknown` if the configuration has no such domain), counting one
    /// more stream.
    pub(crate) fn new(service: &RateLimitService, domain: &str) -> Self {
        let domain = match service.config().has_domain(domain) {
            true => domain.to_owned(),
            false => "unknown".to_owned(),
        };
        let label = [("domain", domain)];
        let stats = Self {
            streams: metrics::gauge!("ratelimit_rlqs_streams", &label),
            buckets: metrics::gauge!("ratelimit_rlqs_buckets", &label),
            reports: metrics::counter!("ratelimit_rlqs_reports_total", &label),
            assignments: metrics::counter!("ratelimit_rlqs_assignments_total", &label),
            abandons: metrics::counter!("ratelimit_rlqs_abandons_total", &label),
            held: Default::default(),
        };
        stats.streams.increment(1.0);
        stats
    }

    /// One report, after which the stream holds `buckets`.
    pub(crate) fn reported(&self, buckets: usize) {
        use std::sync::atomic::Ordering;
        self.reports.increment(1);
        let before = self.held.swap(buckets, Ordering::Relaxed);
        self.buckets.increment(buckets as f64 - before as f64);
    }

    /// Quota assigned to a bucket of `family` (`units`), and what it used since its last
    /// report.
    pub(crate) fn assigned(&self, family: &str, units: u32, used: u64) {
        self.assignments.increment(1);
        let label = [("family", family.to_owned())];
        metrics::counter!("ratelimit_rlqs_quota_assigned_total", &label)
            .increment(u64::from(units));
        metrics::counter!("ratelimit_rlqs_quota_used_total", &label).increment(used);
    }

    /// A bucket abandoned.
    pub(crate) fn abandoned(&self) {
        self.abandons.increment(1);
    }
}

impl Drop for DomainStats {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        self.streams.decrement(1.0);
        self.buckets
            .decrement(self.held.load(Ordering::Relaxed) as f64);
    }
}
