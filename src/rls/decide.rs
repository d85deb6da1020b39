//! The one file of `rls` that calls tollgate's store wrappers: a request's descriptors decided
//! together through the [`Decider`] the layer's limiter also decides through. Everything else
//! (configuration, matching, the service, responses) sees only [`Decider`], [`Ask`] and the
//! [`Decision`]s it returns, so a change of the wrappers' internal API is a change here.

use super::charging::Charging;
use crate::decider::Decider;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::check::Check;
use crate::store::contract::StoreExt;
use crate::store::Store;

/// One limit of a request: a client key under a policy, at a cost (0: look, consume nothing),
/// and whether its denial blocks the request (shadow and quota-mode limits do not).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) key: &'a str,
    pub(crate) policy: &'a Policy,
    pub(crate) cost: u32,
    pub(crate) blocking: bool,
}

/// A request's limits, decided together.
impl Decider {
    /// One decision per ask, in order, all taken at once and atomically, charged as
    /// `charging` says: [`Charging::AllowedOnly`], if a blocking ask with a cost is denied,
    /// consumes nothing from any limit; [`Charging::EveryHit`] charges every ask, allowed or
    /// not; [`Charging::StopWhenOverLimit`], if any ask is denied, charges only the denied
    /// ones. Each decision is what that limit alone would have decided. Asks of cost 0 are
    /// looks (a request of cost 0: denied only past the limit) and consume nothing.
    ///
    /// A request with one counted ask, not charged while over (the common case of
    /// `AllowedOnly`), is one `check`: answered at once when the wrappers can (memory store,
    /// cached denial, lease in hand), and leased when its policy says so. Otherwise it is one
    /// `check_many`: one script call on Redis, one locked step in memory.
    pub(crate) async fn decide(
        &self,
        asks: &[Ask<'_>],
        charging: Charging,
    ) -> Result<Vec<Decision>, StoreError> {
        // One descriptor with a cost, the common request: its answer as the store gives it.
        if let [a] = asks {
            if a.cost > 0 {
                return match charging {
                    Charging::AllowedOnly => Ok(vec![self.check_one(a).await?]),
                    _ => self.store.check_many(&[check(a, charging)]).await,
                };
            }
        }
        let counted: Vec<usize> = (0..asks.len()).filter(|&i| asks[i].cost > 0).collect();
        let mut decided: Vec<(usize, Decision)> = Vec::with_capacity(asks.len());
        match (counted.as_slice(), charging) {
            ([], _) => {}
            (&[i], Charging::AllowedOnly) => decided.push((i, self.check_one(&asks[i]).await?)),
            (many, _) => {
                let checks: Vec<Check<'_>> =
                    (many.iter()).map(|&i| check(&asks[i], charging)).collect();
                let decisions = self.store.check_many(&checks).await?;
                decided.extend(many.iter().copied().zip(decisions));
            }
        }
        for (i, a) in asks.iter().enumerate().filter(|(_, a)| a.cost == 0) {
            decided.push((i, self.store.peek(a.key, a.policy, 0).await?));
        }
        decided.sort_unstable_by_key(|&(i, _)| i);
        Ok(decided.into_iter().map(|(_, d)| d).collect())
    }

    /// One ask alone, not charged while over: answered at once when the wrappers can.
    async fn check_one(&self, a: &Ask<'_>) -> Result<Decision, StoreError> {
        match self.store.check_ready(a.key, a.policy, a.cost) {
            Some(decision) => Ok(decision),
            None => self.store.check(a.key, a.policy, a.cost).await,
        }
    }

    /// One decision per ask, consuming nothing: for a request already refused without the
    /// store (a limit of zero), so that its other limits report what they have left.
    pub(crate) async fn look(&self, asks: &[Ask<'_>]) -> Result<Vec<Decision>, StoreError> {
        let mut decisions = Vec::with_capacity(asks.len());
        for a in asks {
            decisions.push(self.store.peek(a.key, a.policy, a.cost).await?);
        }
        Ok(decisions)
    }
}

/// The store's check for one ask of a `check_many`. Charged while over: no ask blocks
/// another (every hit), or every denial blocks the rest (stop when over limit).
fn check<'a>(a: &Ask<'a>, charging: Charging) -> Check<'a> {
    let (blocking, charge) = match charging {
        Charging::EveryHit => (false, true),
        Charging::StopWhenOverLimit => (true, true),
        Charging::AllowedOnly => (a.blocking, false),
    };
    Check::new(a.key, a.policy, a.cost)
        .blocking(blocking)
        .charge(charge)
}
