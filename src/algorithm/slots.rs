//! [`Slots`]: one client's requests in flight as a shared store keeps them, each slot a lease
//! that its instance renews, and the decision a client is told. The reference the memory
//! store's counts, the state-backed stores and `lua/in_flight.lua` agree with.

use std::time::Duration;

use crate::decision::Decision;

/// How long a client refused for lack of a slot is told to wait (`Retry-After`): a hint, as a
/// slot comes back whenever a request ends, not at a time anyone knows.
pub(crate) const RETRY_HINT: Duration = Duration::from_secs(1);

/// The slots of one client under one limit: each slot's id and when its lease ends (µs), in
/// the order they were taken.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Slots {
    pub(crate) held: Vec<Held>,
}

/// One slot: its id (chosen by the instance that takes it) and the end of its lease (µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) id: u64,
    pub(crate) until: u64,
}

impl Slots {
    /// Takes slot `id` for `ttl` µs from `now` if fewer than `max` slots are live, dropping
    /// those whose lease ended first; whether it did, and how many are held afterwards.
    pub(crate) fn take(&mut self, now: u64, max: u32, ttl: u64, id: u64) -> (bool, u32) {
        self.held.retain(|s| s.until > now);
        let held = self.count();
        if held >= max {
            return (false, held);
        }
        self.held.push(Held {
            id,
            until: now.saturating_add(ttl),
        });
        (true, held + 1)
    }

    /// Gives slot `id` back; whether it was held.
    pub(crate) fn give_back(&mut self, id: u64) -> bool {
        let before = self.held.len();
        self.held.retain(|s| s.id != id);
        self.held.len() != before
    }

    /// Moves the leases of the slots in `ids` that are still held (not expired by `now`) on
    /// to `now + ttl`; how many it renewed. A slot whose lease ended is not taken again: it
    /// may be someone else's now.
    pub(crate) fn renew(&mut self, now: u64, ttl: u64, ids: &[u64]) -> u32 {
        let until = now.saturating_add(ttl);
        let mut renewed = 0;
        for s in &mut self.held {
            if s.until > now && ids.contains(&s.id) {
                s.until = s.until.max(until);
                renewed += 1;
            }
        }
        renewed
    }

    /// When the last lease ends (µs); 0 with none held.
    pub(crate) fn expires_at(&self) -> u64 {
        self.held.iter().map(|s| s.until).max().unwrap_or(0)
    }

    /// How many slots are held (expired ones not yet dropped included).
    fn count(&self) -> u32 {
        u32::try_from(self.held.len()).unwrap_or(u32::MAX)
    }
}

/// What a client is told when it asks for a slot under a limit of `max` and `held` are held
/// afterwards: allowed with what is left, or refused with [`RETRY_HINT`].
pub(crate) fn slot_decision(allowed: bool, max: u32, held: u32) -> Decision {
    let (limit, remaining) = (u64::from(max), u64::from(max.saturating_sub(held)));
    if allowed {
        Decision::allowed(limit, remaining, Duration::ZERO)
    } else {
        Decision::denied(limit, remaining, RETRY_HINT, Some(RETRY_HINT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_up_to_max_given_back_and_expire_unless_renewed() {
        let mut slots = Slots::default();
        assert_eq!(slots.take(0, 2, 100, 1), (true, 1));
        assert_eq!(slots.take(10, 2, 100, 2), (true, 2));
        assert_eq!(slots.take(20, 2, 100, 3), (false, 2));
        assert!(slots.give_back(1));
        assert!(!slots.give_back(1));
        assert_eq!(slots.take(30, 2, 100, 3), (true, 2));
        // Slot 2 is renewed at 90 (to 190); slot 3's lease ends at 130.
        assert_eq!(slots.renew(90, 100, &[2, 7]), 1);
        assert_eq!(slots.take(130, 2, 100, 4), (true, 2));
        // An expired slot is not renewed: it may be someone else's now.
        assert_eq!(slots.renew(200, 100, &[2]), 0);
        assert_eq!(slots.expires_at(), 230);
    }

    #[test]
    fn a_refusal_says_retry_soon() {
        let refused = slot_decision(false, 3, 3);
        assert_eq!(
            (refused.remaining, refused.retry_after),
            (0, Some(RETRY_HINT))
        );
        let allowed = slot_decision(true, 3, 1);
        assert_eq!((allowed.limit, allowed.remaining), (3, 2));
    }
}
