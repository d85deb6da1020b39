//! Hand-computed sequences that several algorithms decide alike, written once and run for each.

mod buckets {
    //! The three buckets admit exactly the same requests, so every sequence runs for each of
    //! [`BUCKETS`]. The bucket files keep what is their own.

    use std::time::Duration;

    use proptest::prelude::*;

    use super::super::support::{decide, delay, setup, spend_burst, BUCKETS};
    use super::super::{history, params, start};
    use crate::algorithm::gcra::Gcra;
    use crate::algorithm::token_bucket::TokenBucket;
    use crate::algorithm::{Algorithm, Params, Scale, State};
    use crate::decision::Decision;
    use crate::{
        clock::ManualClock,
        store::{MemoryStore, Policy},
        Quota,
    };

    const T0: u64 = 1_700_000_000_000_000;

    #[test]
    fn burst_then_deny_then_refill_after_exactly_t() {
        for a in BUCKETS {
            // 5 per 500 ms: T = 100 ms; the i-th request of a burst waits (i − 1)·T in the queue.
            let (store, clock, policy) =
                setup(a, T0, Quota::new(5, Duration::from_millis(500)).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            spend_burst(&store, &policy, 5, 100_000);
            clock.advance(Duration::from_micros(99_999));
            assert_eq!(check(1), (false, 0, 400_001, Some(1), 0), "{a}");
            clock.advance(Duration::from_micros(1));
            assert_eq!(check(1), (true, 0, 500_000, None, 400_000), "{a}");
            assert_eq!(check(1), (false, 0, 500_000, Some(100_000), 0), "{a}");
        }
    }

    #[test]
    fn cost_above_one() {
        for a in BUCKETS {
            let (store, clock, policy) =
                setup(a, T0, Quota::new(5, Duration::from_millis(500)).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            assert_eq!(check(3), (true, 2, 300_000, None, 0), "{a}");
            // 2 left: cost 3 waits for one more interval; half an interval is not enough.
            assert_eq!(check(3), (false, 2, 300_000, Some(100_000), 0), "{a}");
            clock.advance(Duration::from_millis(50));
            assert_eq!(check(3), (false, 2, 250_000, Some(50_000), 0), "{a}");
            clock.advance(Duration::from_millis(50));
            assert_eq!(check(3), (true, 0, 500_000, None, 200_000), "{a}");
            assert_eq!(check(2), (false, 0, 500_000, Some(200_000), 0), "{a}");
        }
    }

    #[test]
    fn cost_above_one_takes_consecutive_slots() {
        for a in BUCKETS {
            let (store, clock, policy) =
                setup(a, T0, Quota::new(5, Duration::from_millis(500)).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            assert_eq!(check(3), (true, 2, 300_000, None, 0), "{a}");
            assert_eq!(check(3), (false, 2, 300_000, Some(100_000), 0), "{a}");
            assert_eq!(check(2), (true, 0, 500_000, None, 300_000), "{a}");
            clock.advance(Duration::from_millis(150));
            // Slots at +300 ms and +400 ms are still queued (150 and 250 ms from now).
            assert_eq!(check(2), (false, 1, 350_000, Some(50_000), 0), "{a}");
            assert_eq!(check(1), (true, 0, 450_000, None, 350_000), "{a}");
        }
    }

    #[test]
    fn cost_above_burst_is_never_allowed_and_changes_nothing() {
        for a in BUCKETS {
            let (store, _clock, policy) =
                setup(a, T0, Quota::new(5, Duration::from_millis(500)).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            assert_eq!(check(6), (false, 5, 0, None, 0), "{a}");
            assert!(store.is_empty(), "{a}");
            assert_eq!(check(2), (true, 3, 200_000, None, 0), "{a}");
            assert_eq!(check(6), (false, 3, 200_000, None, 0), "{a}");
            assert_eq!(check(1), (true, 2, 300_000, None, 200_000), "{a}");
        }
    }

    #[test]
    fn ten_per_second_burst_twenty() {
        for a in BUCKETS {
            // T = 100 ms, B·T = 2 s.
            let (store, clock, policy) =
                setup(a, T0, Quota::per_second(10).unwrap().burst(20).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            spend_burst(&store, &policy, 20, 100_000);
            // One second later ten have come back.
            clock.advance(Duration::from_secs(1));
            assert_eq!(check(1), (true, 9, 1_100_000, None, 1_000_000), "{a}");
            assert_eq!(check(10), (false, 9, 1_100_000, Some(100_000), 0), "{a}");
            assert_eq!(check(9), (true, 0, 2_000_000, None, 1_100_000), "{a}");
            // After two idle seconds the key is forgotten and starts whole.
            clock.advance(Duration::from_secs(2));
            assert_eq!(check(1), (true, 19, 100_000, None, 0), "{a}");
        }
    }

    #[test]
    fn ten_per_second_burst_twenty_counts_whole_tokens() {
        for a in BUCKETS {
            let (store, clock, policy) =
                setup(a, T0, Quota::per_second(10).unwrap().burst(20).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            spend_burst(&store, &policy, 20, 100_000);
            clock.advance(Duration::from_millis(1_050));
            // 10.5 tokens: 10 whole ones.
            assert_eq!(check(11), (false, 10, 950_000, Some(50_000), 0), "{a}");
            assert_eq!(check(10), (true, 0, 1_950_000, None, 950_000), "{a}");
            clock.advance(Duration::from_secs(5));
            assert_eq!(check(20), (true, 0, 2_000_000, None, 0), "{a}");
        }
    }

    #[test]
    fn sub_millisecond_periods() {
        for a in BUCKETS {
            // 1 per 50 µs.
            let (store, clock, policy) =
                setup(a, T0, Quota::new(1, Duration::from_micros(50)).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            spend_burst(&store, &policy, 1, 50);
            clock.advance(Duration::from_micros(49));
            assert_eq!(check(1), (false, 0, 1, Some(1), 0), "{a}");
            clock.advance(Duration::from_micros(1));
            assert_eq!(check(1), (true, 0, 50, None, 0), "{a}");

            // 5 per 100 µs: T = 20 µs.
            let (store, clock, policy) =
                setup(a, T0, Quota::new(5, Duration::from_micros(100)).unwrap());
            let check = |cost| decide(&store, &policy, cost);
            spend_burst(&store, &policy, 5, 20);
            clock.advance(Duration::from_micros(45));
            assert_eq!(check(2), (true, 0, 95, None, 55), "{a}");
        }
    }

    /// `State::check` without its `cost.max(1)`, so that cost 0 reaches the bucket.
    fn check_raw(state: &mut State, p: &Params, now: u64, cost: u64) -> Decision {
        match state {
            State::Gcra(s) => s.check(p, now, cost),
            State::TokenBucket(s) => s.check(p, now, cost),
            State::LeakyBucket(s) => s.check(p, now, cost),
            _ => unreachable!("not a bucket"),
        }
    }

    #[test]
    fn clock_going_back_and_extreme_times_never_panic() {
        for a in BUCKETS {
            let p = Quota::per_second(10).unwrap().burst(20).unwrap().params(a);
            let mut s = State::new(a);
            for now in [
                0,
                5,
                0,
                u64::MAX - 1,
                u64::MAX,
                0,
                1 << 53,
                (1 << 53) - 1,
                3,
            ] {
                for cost in [0, 1, 7, 20, 21, u64::MAX] {
                    let d = check_raw(&mut s, &p, now, cost);
                    assert!(d.remaining <= 20, "{a}");
                    let _ = delay(&p, &d, cost);
                }
                let _ = s.expires_at(&p);
            }
            let huge = Params {
                limit: 1,
                period: u64::MAX,
                burst: u64::MAX,
                interval: u64::MAX,
                home: Scale {
                    interval: u64::MAX,
                    burst: u64::MAX,
                },
            };
            let mut s = State::new(a);
            for now in [0, u64::MAX, 1] {
                let _ = check_raw(&mut s, &huge, now, u64::MAX);
                let _ = check_raw(&mut s, &huge, now, 1);
            }
        }
    }

    /// The three bucket algorithms side by side.
    #[derive(Debug, Clone)]
    struct Buckets {
        gcra: Gcra,
        token: TokenBucket,
        leaky: State,
    }

    impl Default for Buckets {
        fn default() -> Self {
            Self {
                gcra: Gcra::default(),
                token: TokenBucket::default(),
                leaky: State::new(Algorithm::LeakyBucket),
            }
        }
    }

    proptest! {
        #[test]
        fn the_three_buckets_decide_alike(
            p in params(Algorithm::Gcra),
            start in start(),
            steps in history(false),
        ) {
            let mut b = Buckets::default();
            let mut now = start;
            for step in steps {
                now = step.next(now, &p, Algorithm::Gcra);
                let cost = step.cost(&p);
                let g = b.gcra.check(&p, now, cost);
                prop_assert_eq!(b.token.check(&p, now, cost), g);
                prop_assert_eq!(b.leaky.check(&p, now, cost), g);
                prop_assert_eq!(b.token.expires_at(&p), b.gcra.expires_at(&p));
                prop_assert_eq!(b.leaky.expires_at(&p), b.gcra.expires_at(&p));
            }
        }
    }

    #[test]
    fn the_three_buckets_decide_alike_through_the_store() {
        // A seeded walk through the memory store, which also forgets expired keys.
        let mut rng: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for quota in [
            Quota::per_second(10).unwrap().burst(20).unwrap(),
            Quota::new(1, Duration::from_micros(50)).unwrap(),
            Quota::new(5, Duration::from_micros(100)).unwrap(),
            Quota::new(7, Duration::from_millis(3))
                .unwrap()
                .burst(3)
                .unwrap(),
        ] {
            let clock = ManualClock::new(T0);
            let store = MemoryStore::with_clock(clock.clone());
            let policies = BUCKETS.map(|a| Policy::new(a.as_str(), quota, a).unwrap());
            let t = policies[0].params().interval;
            let burst = policies[0].params().burst as u32;
            for _ in 0..5_000 {
                clock.advance(Duration::from_micros(next(t * 3)));
                let cost = 1 + next(u64::from(burst) + 1) as u32;
                let [g, tb, lb] = policies.each_ref().map(|p| store.check_now("k", p, cost));
                assert_eq!(g, tb);
                assert_eq!(g, lb);
            }
        }
    }
}

mod windows {
    //! Where fixed window, fixed window from first and the sliding window log decide alike:
    //! from a first request at the start of a window, and with a clock that goes back. (The
    //! sliding window counter's previous window keeps counting, so it differs.)

    use std::time::Duration;

    use super::super::support::{d, setup, ALIGNED, UNALIGNED};
    use crate::algorithm::Algorithm;
    use crate::Quota;

    /// Each algorithm with a time its first request opens a window at: an aligned one for the
    /// fixed window, any for the others.
    const WINDOWS: [(Algorithm, u64); 3] = [
        (Algorithm::FixedWindow, ALIGNED),
        (Algorithm::FixedWindowFromFirst, UNALIGNED),
        (Algorithm::SlidingWindowLog, UNALIGNED),
    ];

    #[test]
    fn several_requests_in_one_microsecond() {
        for (a, t0) in WINDOWS {
            let (store, clock, policy) = setup(a, t0, Quota::per_second(3).unwrap());
            let check = |cost| store.check_now("k", &policy, cost);
            for left in (0..3).rev() {
                assert_eq!(check(1), d(3, true, left, 1_000_000, None), "{a}");
            }
            clock.set(t0 + 999_999);
            assert_eq!(check(1), d(3, false, 0, 1, Some(1)), "{a}");
            clock.set(t0 + 1_000_000);
            assert_eq!(check(3), d(3, true, 0, 1_000_000, None), "{a}");
        }
    }

    #[test]
    fn a_clock_that_goes_back_stays_in_the_stored_window() {
        // The first request, then a time before it: the window that holds the request (the
        // aligned one it fell in, for the fixed window) still counts it and ends 150 µs later.
        // The log stands at its newest entry.
        for (a, first, back) in [
            (Algorithm::FixedWindow, ALIGNED + 150, ALIGNED + 50),
            (Algorithm::FixedWindowFromFirst, UNALIGNED, UNALIGNED - 50),
            (Algorithm::SlidingWindowLog, UNALIGNED, UNALIGNED - 50),
        ] {
            let quota = Quota::new(1, Duration::from_micros(100)).unwrap();
            let (store, clock, policy) = setup(a, first, quota);
            assert!(store.check_now("k", &policy, 1).allowed, "{a}");
            clock.set(back);
            let expected = d(1, false, 0, 150, Some(150));
            assert_eq!(store.check_now("k", &policy, 1), expected, "{a}");
        }
    }
}
