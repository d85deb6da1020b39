//! tollgate: rate limiting for Tower services.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod algorithm;
mod clock;
mod decision;
mod error;
pub mod key;
mod quota;
pub mod store;

pub use algorithm::Algorithm;
pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::Decision;
pub use error::{ConfigError, StoreError};
pub use quota::{Policy, Quota};
pub use store::Store;
