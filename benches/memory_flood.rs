//! Run with `cargo bench --bench memory_flood`.
//!
//! The memory store's resident memory through a random-key flood and after it: a client that
//! sends a fresh key with every request (a random `x-api-key`) makes the store track one key per
//! request until the keys expire. Prints the process's resident set size (from
//! `/proc/self/statm`, Linux only) before the flood, at its end, and once the flood's keys have
//! expired and ordinary traffic has gone on; three floods in a row. The clock is a
//! `ManualClock`, so the run takes seconds whatever the simulated durations.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate::store::{MemoryStore, Policy};
use tollgate::{clock::ManualClock, Algorithm};

/// Requests in a flood, each with a new key.
const FLOOD: u64 = 1_000_000;
/// A flood lasts this long on the store's clock (a key lives 2 s after its one request).
const FLOOD_SPAN: Duration = Duration::from_secs(5);
/// Ordinary traffic after the flood: this many requests from `CLIENTS` clients.
const AFTER: u64 = 20_000;
const CLIENTS: u64 = 100;

fn main() {
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = MemoryStore::with_clock(clock.clone());
    let policy = Policy::new(
        "flood",
        "5/10s".parse().expect("a valid quota"),
        Algorithm::Gcra,
    )
    .expect("a valid policy");
    let mut rng = SmallRng::seed_from_u64(7);
    report("before", &store);

    // The later floods show whether the first one's memory is used again or added to.
    for round in 1..=3 {
        let step = FLOOD_SPAN / u32::try_from(FLOOD).expect("fits");
        for _ in 0..FLOOD {
            clock.advance(step);
            let key = format!("{:032x}", rng.random::<u128>());
            store.check_now(&key, &policy, 1);
        }
        report(&format!("end of flood {round}"), &store);

        // Every flood key has expired (5/10s: at most 10 s of state); ordinary clients go on.
        clock.advance(Duration::from_secs(11));
        for i in 0..AFTER {
            clock.advance(Duration::from_millis(1));
            store.check_now(&format!("client-{}", i % CLIENTS), &policy, 1);
        }
        report(&format!("after flood {round}"), &store);
    }
}

fn report(when: &str, store: &MemoryStore) {
    println!(
        "{when:>15}: {:>8} keys tracked, RSS {}",
        store.len(),
        rss().map_or_else(|| "unknown".to_owned(), |mb| format!("{mb:.1} MB")),
    );
}

/// Resident set size in MB: the second field of `/proc/self/statm`, in 4 KiB pages.
fn rss() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096.0 / 1e6)
}
