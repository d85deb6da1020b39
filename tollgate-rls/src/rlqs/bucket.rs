//! The mapping from an RLQS bucket to a descriptor of the YAML configuration: a `BucketId`
//! is a map, a descriptor a list, so its entries are taken sorted by key. One key `k` with
//! value `v` is the descriptor entry `k`=`v` in the stream's domain.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
use tonic::Status;

use super::bounds::{malformed, MAX_BUCKET_KEYS};
use crate::limits::{MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// A bucket's entries, sorted by key: its identity on a stream and its descriptor.
pub(crate) type BucketKey = Vec<(String, String)>;

/// The bucket's entries sorted by key, after the bounds on keys and lengths; an empty or
/// missing bucket id is malformed.
pub(crate) fn bucket_key(id: Option<&BucketId>) -> Result<BucketKey, Status> {
    let id = id.ok_or_else(|| malformed("a bucket usage without bucket_id"))?;
    if id.bucket.is_empty() {
        return Err(malformed("a bucket_id without keys"));
    }
    if id.bucket.len() > MAX_BUCKET_KEYS {
        let n = id.bucket.len();
        return Err(malformed(format_args!(
            "keys per bucket: {n}, over the limit of {MAX_BUCKET_KEYS}"
        )));
    }
    for (k, v) in &id.bucket {
        if k.is_empty() || k.len() > MAX_KEY_BYTES || v.len() > MAX_VALUE_BYTES {
            return Err(malformed(format_args!(
                "a bucket key must have 1 to {MAX_KEY_BYTES} bytes and its value at most \
                 {MAX_VALUE_BYTES}"
            )));
        }
    }
    let mut key: BucketKey = (id.bucket.iter())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    key.sort_unstable();
    Ok(key)
}

/// The descriptor a bucket stands for.
pub(crate) fn descriptor(key: &BucketKey) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: (key.iter())
            .map(|(k, v)| Entry {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
        is_negative_hits: false,
    }
}

/// The `BucketId` of a key, as the answer names it.
pub(crate) fn bucket_id(key: &BucketKey) -> BucketId {
    BucketId {
        bucket: key.iter().cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(pairs: &[(&str, &str)]) -> BucketId {
        BucketId {
            bucket: (pairs.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn entries_are_sorted_by_key() {
        let key = bucket_key(Some(&id(&[("z", "1"), ("a", "2")]))).unwrap();
        let d = descriptor(&key);
        let keys: Vec<&str> = d.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["a", "z"]);
        assert_eq!(bucket_id(&key), id(&[("a", "2"), ("z", "1")]));
    }

    #[test]
    fn empty_and_oversized_buckets_are_malformed() {
        assert!(bucket_key(None)
            .unwrap_err()
            .message()
            .contains("without bucket_id"));
        assert!(bucket_key(Some(&id(&[])))
            .unwrap_err()
            .message()
            .contains("without keys"));
        let many: Vec<(String, String)> = (0..=MAX_BUCKET_KEYS)
            .map(|i| (format!("k{i}"), String::new()))
            .collect();
        let many = BucketId {
            bucket: many.into_iter().collect(),
        };
        let error = bucket_key(Some(&many)).unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument);
        assert!(error
            .message()
            .contains("keys per bucket: 33, over the limit of 32"));
    }
}
