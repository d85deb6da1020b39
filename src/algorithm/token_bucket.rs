//! Placeholder: being written.

use super::Params;
use crate::decision::Decision;

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TokenBucket {}

impl TokenBucket {
    pub(crate) fn check(&mut self, p: &Params, _now: u64, _cost: u64) -> Decision {
        Decision::from_micros(true, p.limit, p.limit, 0, None)
    }

    pub(crate) fn expires_at(&self, _p: &Params) -> u64 {
        0
    }
}
