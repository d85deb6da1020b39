//! The library (`tollgate_rls::RateLimitService`) in a real tonic server, or called directly:
//! one test crate, each suite a module. The binary's own tests are the other files of `tests/`.
//!
//! Run them with `cargo test -p tollgate-rls --test library`, one suite with a filter, e.g.
//! `cargo test -p tollgate-rls --test library charging::`.

use tollgate_test_kit as support;

mod charging;
mod limits;
mod service;
