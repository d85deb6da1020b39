//! Helpers for the crate's own unit tests.

pub(crate) mod log;
