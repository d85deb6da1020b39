//! [`Lease`]: how many units of quota an instance takes from the store at once for a hot key.

use std::fmt;
use std::str::FromStr;

use crate::algorithm::Algorithm;
use crate::error::{ConfigError, ConfigErrorKind};

/// How an instance leases units of a policy's quota from the store, to decide locally until
/// they are spent or the lease expires (see [hot keys](crate::guide::redis#hot-keys-leased-quota)).
///
/// For hot keys only (a global limit, one big customer): every request of such a key is
/// otherwise a round trip to one Redis core. Leases never admit more than the quota: every
/// unit spent locally was consumed in the store first, by one atomic call. What they cost is
/// under-admission, at most the units leased and not yet used: a lease lasts at most 1 s (and
/// never longer than the period or a fixed window), and its unused units are given back when
/// it expires, as far as the algorithm can take them back exactly.
///
/// ```
/// use tollgate::{Quota, rules::{Rule, Lease}};
///
/// let rule = Rule::new("global", Quota::per_second(20_000)?).lease(Lease::Auto);
/// let fixed = Rule::new("partner", Quota::per_second(500)?).lease(Lease::tokens(25));
/// assert_eq!("auto".parse::<Lease>()?, Lease::Auto);
/// # let _ = (rule, fixed);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lease {
    /// Sized from this instance's recent rate for the key: about a tenth of a second of its
    /// traffic, at least 1, at most a fifth of the limit and never more than the burst.
    Auto,
    /// Up to this many units per lease (at least 1, at most the burst).
    Tokens(u32),
}

impl Lease {
    /// Leases of up to `n` units.
    pub const fn tokens(n: u32) -> Self {
        Lease::Tokens(n)
    }

    /// The algorithms whose stores can lease exactly.
    pub const ALGORITHMS: [Algorithm; 5] = [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::FixedWindow,
        Algorithm::FixedWindowFromFirst,
    ];

    /// Checks the lease against the policy's algorithm and capacity.
    pub(crate) fn validate(&self, algorithm: Algorithm, capacity: u32) -> Result<(), ConfigError> {
        let fail = |why: String| Err(ConfigError::with_kind(ConfigErrorKind::Rule, why));
        if !Self::ALGORITHMS.contains(&algorithm) {
            let names: Vec<&str> = Self::ALGORITHMS.iter().map(Algorithm::as_str).collect();
            return fail(format!(
                "lease does not work with {algorithm}: a sliding window cannot give back \
                 unused units exactly; leases work with {}",
                names.join(", ")
            ));
        }
        match *self {
            Lease::Tokens(0) => fail("a lease must be of at least 1 token".into()),
            Lease::Tokens(n) if n > capacity => fail(format!(
                "a lease of {n} tokens is more than the quota's capacity of {capacity}; use at \
                 most {capacity}, or \"auto\""
            )),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lease::Auto => f.write_str("auto"),
            Lease::Tokens(n) => write!(f, "{n}"),
        }
    }
}

impl FromStr for Lease {
    type Err = ConfigError;

    /// `"auto"` or a whole number of tokens from 1.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(Lease::Auto),
            n => n
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .map(Lease::Tokens)
                .ok_or_else(|| {
                    ConfigError::with_kind(
                        ConfigErrorKind::Rule,
                        format!(
                            "invalid lease {s:?} (use \"auto\" or a whole number of tokens from 1)"
                        ),
                    )
                }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_auto_and_numbers_and_refuses_the_rest() {
        assert_eq!("auto".parse::<Lease>().unwrap(), Lease::Auto);
        assert_eq!("25".parse::<Lease>().unwrap(), Lease::tokens(25));
        let e = "0".parse::<Lease>().unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid lease \"0\" (use \"auto\" or a whole number of tokens from 1)"
        );
        assert!("many".parse::<Lease>().is_err());
    }

    #[test]
    fn sliding_windows_and_oversized_leases_are_refused() {
        let e = Lease::Auto
            .validate(Algorithm::SlidingWindow, 10)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("leases work with gcra, token_bucket, leaky_bucket, fixed_window, fixed_window_from_first"),
            "{e}"
        );
        assert!(Lease::Auto
            .validate(Algorithm::SlidingWindowLog, 10)
            .is_err());
        let e = Lease::tokens(11).validate(Algorithm::Gcra, 10).unwrap_err();
        assert!(e.to_string().contains("capacity of 10"), "{e}");
        assert!(Lease::tokens(10)
            .validate(Algorithm::FixedWindow, 10)
            .is_ok());
    }
}
