//! Bounds on what one request may ask, checked before anything is matched or counted: a
//! request's fields come from clients, so the work a request costs must not follow what it
//! sends. An Envoy route sends one descriptor per `rate_limits` entry and one entry per action,
//! a handful of each; the bounds are far above that and keep the worst accepted request cheap
//! (and its store call small: one Redis script call of at most [`MAX_DESCRIPTORS`] checks).

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::Status;

/// The largest request, in bytes: a gRPC message as encoded (the server from
/// [`RateLimitService::into_server`](super::RateLimitService::into_server) refuses a larger one
/// from its length alone, before reading it, with tonic's `OUT_OF_RANGE`), or a `POST /json`
/// body. As much as [`MAX_DESCRIPTORS`] values of [`MAX_VALUE_BYTES`]; an Envoy request takes
/// a few hundred bytes.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
/// The most descriptors one request may carry.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries (key and value pairs) one descriptor may carry.
pub const MAX_ENTRIES: usize = 32;
/// The longest domain, in bytes.
pub const MAX_DOMAIN_BYTES: usize = 256;
/// The longest entry key, in bytes (keys are names from Envoy's configuration).
pub const MAX_KEY_BYTES: usize = 256;
/// The longest entry value, in bytes (a value may be a header, a path or an address).
pub const MAX_VALUE_BYTES: usize = 4096;

/// What a request exceeds: the limit's name, what was sent and the limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OverLimit(String);

impl OverLimit {
    /// The message for the client.
    pub(crate) fn message(&self) -> &str {
        &self.0
    }
}

impl From<OverLimit> for Status {
    fn from(over: OverLimit) -> Self {
        Status::invalid_argument(over.0)
    }
}

/// How large a request's body may be: refused past [`MAX_REQUEST_BYTES`].
pub(crate) fn bytes(len: usize) -> Result<(), OverLimit> {
    at_most(len, MAX_REQUEST_BYTES, || "bytes in the request".into())
}

/// How many descriptors a request may carry: refused past [`MAX_DESCRIPTORS`].
pub(crate) fn descriptors(count: usize) -> Result<(), OverLimit> {
    at_most(count, MAX_DESCRIPTORS, || "descriptors per request".into())
}

/// How many entries descriptor `index` may carry: refused past [`MAX_ENTRIES`].
pub(crate) fn entries(index: usize, count: usize) -> Result<(), OverLimit> {
    at_most(count, MAX_ENTRIES, || {
        format!("entries in descriptor {index}")
    })
}

/// Every bound on `request`, in a time that does not grow with what it sends past them: the
/// counts are read before the descriptors and entries they count.
pub(crate) fn check(request: &RateLimitRequest) -> Result<(), OverLimit> {
    let domain = request.domain.len();
    at_most(domain, MAX_DOMAIN_BYTES, || "bytes in the domain".into())?;
    descriptors(request.descriptors.len())?;
    for (d, descriptor) in request.descriptors.iter().enumerate() {
        entries(d, descriptor.entries.len())?;
        for (e, entry) in descriptor.entries.iter().enumerate() {
            at_most(entry.key.len(), MAX_KEY_BYTES, || {
                format!("bytes in the key of descriptor {d}, entry {e}")
            })?;
            at_most(entry.value.len(), MAX_VALUE_BYTES, || {
                format!("bytes in the value of descriptor {d}, entry {e}")
            })?;
        }
    }
    Ok(())
}

/// `Ok` if `sent` is within `limit`; else the error, naming what was counted.
fn at_most(sent: usize, limit: usize, what: impl FnOnce() -> String) -> Result<(), OverLimit> {
    match sent <= limit {
        true => Ok(()),
        false => Err(OverLimit(format!(
            "{}: {sent}, over the limit of {limit}",
            what()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::descriptor;

    fn request(descriptors: usize, entries: usize) -> RateLimitRequest {
        let entry = ("k", "v");
        RateLimitRequest {
            domain: "d".into(),
            descriptors: (0..descriptors)
                .map(|_| descriptor(&vec![entry; entries]))
                .collect(),
            hits_addend: 0,
        }
    }

    #[test]
    fn each_bound_accepts_its_limit_and_names_itself_one_past_it() {
        assert_eq!(check(&request(MAX_DESCRIPTORS, MAX_ENTRIES)), Ok(()));
        assert_eq!(bytes(MAX_REQUEST_BYTES), Ok(()));
        assert_eq!(
            bytes(MAX_REQUEST_BYTES + 1).unwrap_err().message(),
            "bytes in the request: 262145, over the limit of 262144"
        );
        let message = |r: &RateLimitRequest| check(r).unwrap_err().message().to_owned();
        assert_eq!(
            message(&request(MAX_DESCRIPTORS + 1, 1)),
            "descriptors per request: 65, over the limit of 64"
        );
        assert_eq!(
            message(&request(2, MAX_ENTRIES + 1)),
            "entries in descriptor 0: 33, over the limit of 32"
        );
        let mut r = request(1, 1);
        r.domain = "d".repeat(MAX_DOMAIN_BYTES);
        assert_eq!(check(&r), Ok(()));
        r.domain.push('d');
        assert_eq!(
            message(&r),
            "bytes in the domain: 257, over the limit of 256"
        );

        let mut r = request(2, 2);
        r.descriptors[1].entries[1].key = "k".repeat(MAX_KEY_BYTES);
        r.descriptors[1].entries[1].value = "v".repeat(MAX_VALUE_BYTES);
        assert_eq!(check(&r), Ok(()));
        r.descriptors[1].entries[1].value.push('v');
        assert_eq!(
            message(&r),
            "bytes in the value of descriptor 1, entry 1: 4097, over the limit of 4096"
        );
        r.descriptors[1].entries[0]
            .key
            .push_str(&"k".repeat(MAX_KEY_BYTES));
        assert_eq!(
            message(&r),
            "bytes in the key of descriptor 1, entry 0: 257, over the limit of 256"
        );
    }
}
