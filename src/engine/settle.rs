//! Settling a cost known after the response: the difference between what a request reserved
//! and what it cost, charged or given back in one store call.

use super::{Ask, Charging, Engine};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;

impl Engine {
    /// Settles a request of the client `key` under `policy` that reserved `reserved` units
    /// (its estimate, taken when it was admitted) and turned out to cost `cost`, in one store
    /// call: the difference is charged even past the quota ("charged while over", to at most
    /// one more quota: see the [algorithms guide](crate::guide::algorithms)), so a client
    /// never escapes what it used, or given back as far as the algorithm allows (see
    /// [`refund`](Self::refund)). The decision of a charge, with nothing `remaining` once
    /// past the quota; `None` when something was given back or nothing changed.
    ///
    /// Give back only what is still in the quota's time: once the quota would have been
    /// whole again after the reservation (the end of its window, for the fixed windows), the
    /// reservation has expired by itself; settle then with `reserved` at most `cost`.
    ///
    /// # Errors
    ///
    /// The store's error when it could not settle and nothing fell back: the difference is
    /// lost.
    pub async fn settle(
        &self,
        key: &str,
        policy: &Policy,
        reserved: u32,
        cost: u32,
    ) -> Result<Option<Decision>, StoreError> {
        if cost > reserved {
            let ask = Ask::new(key, policy, cost - reserved);
            let decided = self.decide(&[ask], Charging::EveryHit).await?;
            return Ok(decided.first().map(|decision| {
                let mut decision = *decision;
                if !decision.allowed {
                    decision.remaining = 0;
                }
                decision
            }));
        }
        if cost < reserved {
            self.refund(key, policy, reserved - cost).await?;
        }
        Ok(None)
    }
}
