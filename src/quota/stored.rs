//! A quota as a store keeps it (a client's override, see `Engine::set_quota`): `L:P:B`, the
//! limit, the period in µs and the burst (0 for none), in decimal, on every store alike, so
//! that `redis-cli GET` shows what is set.

use std::time::Duration;

use super::Quota;
use crate::error::StoreError;

impl Quota {
    /// The limit, the period in µs and the burst (0 for none): how stores keep a quota.
    pub(crate) fn numbers(&self) -> [u64; 3] {
        [
            u64::from(self.limit),
            u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX),
            u64::from(self.burst.unwrap_or(0)),
        ]
    }

    /// The quota of [`numbers`](Self::numbers), checked as every quota is.
    pub(crate) fn from_numbers([limit, period, burst]: [u64; 3]) -> Result<Self, StoreError> {
        let unreadable = || StoreError::key_state(format!("{limit}:{period}:{burst} is no quota"));
        let limit = u32::try_from(limit).map_err(|_| unreadable())?;
        let quota = Quota::new(limit, Duration::from_micros(period)).map_err(|_| unreadable())?;
        match burst {
            0 => Ok(quota),
            b => quota
                .burst(u32::try_from(b).map_err(|_| unreadable())?)
                .map_err(|_| unreadable()),
        }
    }

    /// `L:P:B`.
    pub(crate) fn stored(&self) -> String {
        let [l, p, b] = self.numbers();
        format!("{l}:{p}:{b}")
    }

    /// The quota in `L:P:B`.
    pub(crate) fn from_stored(bytes: &[u8]) -> Result<Self, StoreError> {
        let unreadable = || {
            let text = String::from_utf8_lossy(bytes);
            StoreError::key_state(format!(
                "{text:?} is no stored quota (limit:period_us:burst)"
            ))
        };
        let text = std::str::from_utf8(bytes).map_err(|_| unreadable())?;
        let mut numbers = [0u64; 3];
        let mut parts = text.split(':');
        for n in &mut numbers {
            *n = parts
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or_else(unreadable)?;
        }
        if parts.next().is_some() {
            return Err(unreadable());
        }
        Self::from_numbers(numbers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_quota_reads_back_as_it_was() {
        for text in ["50/10s", "10/s; burst=20", "1/day", "3/250ms"] {
            let quota: Quota = text.parse().unwrap();
            assert_eq!(
                Quota::from_stored(quota.stored().as_bytes()).unwrap(),
                quota
            );
        }
        assert_eq!(Quota::per_second(5).unwrap().stored(), "5:1000000:0");
        for bad in [
            "",
            "5",
            "5:1000000",
            "0:1000000:0",
            "5:1000000:0:1",
            "a:b:c",
            "5:10:0",
        ] {
            assert!(Quota::from_stored(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
