//! The one orchestration of a decision: a request's limits decided together, as the layer,
//! Envoy's services and the door ask for them, in every charging mode.

use super::{Ask, Charging, Engine};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::store::check::Check;
use crate::store::contract::StoreExt;
use crate::store::Store;

impl Engine {
    /// One decision per ask, in order, each as that limit alone would decide it, charged as
    /// `charging` says:
    ///
    /// - [`Charging::AllowedOnly`]: a refused request consumes nothing. The looks
    ///   ([`Ask::look`], or cost 0) are decided first; if a blocking one is over its limit, every other ask is only
    ///   looked at too. Else the asks with a cost are decided in one atomic step: if a
    ///   blocking one is denied nothing is consumed from any, else each allowed one is.
    /// - [`Charging::EveryHit`]: every ask but the looks is charged, allowed or not; the
    ///   looks are decided after the charges.
    /// - [`Charging::StopWhenOverLimit`]: if an ask is denied, only the denied ones are
    ///   charged; else all are; looks as for every hit.
    ///
    /// A request with one ask that is not a look, not charged while over, is one store check:
    /// answered at once when the wrappers can (memory store, cached denial, lease in hand),
    /// and leased when its policy says so. Otherwise the asks that are not looks are one stacked
    /// check: one script call on Redis, one locked step in memory.
    ///
    /// # Errors
    ///
    /// The store's error when it could not decide and nothing fell back (see
    /// [`on_store_error`](Self::on_store_error)).
    pub async fn decide(
        &self,
        asks: &[Ask<'_>],
        charging: Charging,
    ) -> Result<Vec<Decision>, StoreError> {
        if let [a] = asks {
            if !a.is_look() {
                return match charging {
                    Charging::AllowedOnly => Ok(vec![self.decide_one(a).await?]),
                    _ => self.store.check_many(&[check(a, charging)]).await,
                };
            }
        }
        let mut decisions: Vec<Option<Decision>> = vec![None; asks.len()];
        let looks_first = charging == Charging::AllowedOnly;
        if looks_first && self.look_at(asks, &mut decisions, true).await? {
            // A blocking look is over its limit: the request is refused, and consumes nothing.
            self.look_at(asks, &mut decisions, false).await?;
            return Ok(decisions.into_iter().flatten().collect());
        }
        let counted: Vec<usize> = (0..asks.len()).filter(|&i| !asks[i].is_look()).collect();
        match (counted.as_slice(), charging) {
            ([], _) => {}
            (&[i], Charging::AllowedOnly) => decisions[i] = Some(self.decide_one(&asks[i]).await?),
            (many, _) => {
                let checks: Vec<Check<'_>> =
                    (many.iter()).map(|&i| check(&asks[i], charging)).collect();
                let decided = self.store.check_many(&checks).await?;
                for (&i, decision) in many.iter().zip(decided) {
                    decisions[i] = Some(decision);
                }
            }
        }
        if !looks_first {
            self.look_at(asks, &mut decisions, true).await?;
        }
        Ok(decisions.into_iter().flatten().collect())
    }

    /// One ask alone, not charged while over (the common request): answered at once when the
    /// wrappers can, else by one store check.
    ///
    /// # Errors
    ///
    /// As for [`decide`](Self::decide).
    pub async fn decide_one(&self, ask: &Ask<'_>) -> Result<Decision, StoreError> {
        match self.store.check_ready(ask.key, ask.policy, ask.cost) {
            Some(decision) => Ok(decision),
            None => self.store.check(ask.key, ask.policy, ask.cost).await,
        }
    }

    /// [`decide_one`](Self::decide_one) after [`decide_ready`](Self::decide_ready) answered
    /// `None`: straight to the store, without asking the wrappers again (the layer's path).
    pub(crate) async fn decide_one_waiting(&self, ask: &Ask<'_>) -> Result<Decision, StoreError> {
        self.store.check(ask.key, ask.policy, ask.cost).await
    }

    /// The decision of one ask, not charged while over, when the store can make it at once in
    /// this process: a memory store always can, the cache of denials for a client it holds a
    /// denial of, the leases from a lease in hand. `None`: nothing was changed, and the ask
    /// needs [`decide_one`](Self::decide_one).
    #[inline]
    pub fn decide_ready(&self, ask: &Ask<'_>) -> Option<Decision> {
        self.store.check_ready(ask.key, ask.policy, ask.cost)
    }

    /// [`decide`](Self::decide)'s decisions when the store can make them all at once in this
    /// process (as [`decide_ready`](Self::decide_ready) for one ask: a memory store always
    /// can, whatever the charging), without a future. `None`: nothing was changed, and the
    /// asks need `decide`. Asks that only look are left to `decide`.
    pub fn decide_now(&self, asks: &[Ask<'_>], charging: Charging) -> Option<Vec<Decision>> {
        if asks.is_empty() || asks.iter().any(Ask::is_look) {
            return None;
        }
        match (asks, charging) {
            ([a], Charging::AllowedOnly) => Some(vec![self.decide_ready(a)?]),
            ([a], _) => self.store.check_many_ready(&[check(a, charging)]),
            (many, _) => {
                let checks: Vec<Check<'_>> = (many.iter()).map(|a| check(a, charging)).collect();
                self.store.check_many_ready(&checks)
            }
        }
    }

    /// One decision per ask, consuming nothing: for a request refused before the store was
    /// asked (e.g. a limit of zero), so that its other limits report what they have left.
    ///
    /// # Errors
    ///
    /// As for [`decide`](Self::decide).
    pub async fn look(&self, asks: &[Ask<'_>]) -> Result<Vec<Decision>, StoreError> {
        let mut decisions = Vec::with_capacity(asks.len());
        for a in asks {
            decisions.push(self.store.peek(a.key, a.policy, a.cost).await?);
        }
        Ok(decisions)
    }

    /// Looks at the asks that are looks (`looks`) or the others, into `decisions`; whether a
    /// blocking one of them is denied.
    async fn look_at(
        &self,
        asks: &[Ask<'_>],
        decisions: &mut [Option<Decision>],
        looks: bool,
    ) -> Result<bool, StoreError> {
        let mut denied = false;
        for (i, a) in asks
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_look() == looks)
        {
            let decision = self.store.peek(a.key, a.policy, a.cost).await?;
            denied |= a.blocking && !decision.allowed;
            decisions[i] = Some(decision);
        }
        Ok(denied)
    }
}

/// The store's check for one ask of a stacked check. Charged while over: no ask blocks
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
