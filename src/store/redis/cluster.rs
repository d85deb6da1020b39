//! Stacked limits on a Redis Cluster, where one script may touch the keys of one slot only:
//! grouped by slot, one atomic call when they share one, else a dry run of every group and a
//! commit (see [`RedisStore`]'s docs for what that guarantees).

use std::collections::HashMap;

use deadpool_redis::redis::cluster_routing::Slot;
use futures_util::future::try_join_all;

use super::{reply, RedisStore};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::store::check::Check;
use crate::store::Store;

/// Decides one request against several limits: one atomic script call when every key is
/// in one slot, else a dry run of each slot's group and a commit (see `RedisStore`'s docs).
pub(super) async fn check_many(
    store: &RedisStore,
    checks: &[Check<'_>],
) -> Result<Vec<Decision>, StoreError> {
    match checks {
        [] => return Ok(Vec::new()),
        [one] if !one.charge => return Ok(vec![store.check(one.key, one.policy, one.cost).await?]),
        _ => {}
    }
    let keys: Vec<String> = checks
        .iter()
        .map(|c| store.state_key(c.policy, c.key))
        .collect();
    let now = store.now_arg();
    let groups = group_by_slot(&keys);
    if groups.len() == 1 {
        let reply = store
            .eval(store.scripts().stacked(keys, checks, &now, false))
            .await?;
        return reply::decisions_from_reply(checks, &reply);
    }
    let dry = decide_groups(store, checks, &keys, &groups, &now, true).await?;
    let blocked = checks
        .iter()
        .zip(&dry)
        .any(|(c, d)| c.blocking && !d.allowed);
    if blocked {
        charge_denied(store, checks, &keys, &now, &dry).await?;
        return start_blocks(store, checks, &keys, &groups, &now, dry).await;
    }
    decide_groups(store, checks, &keys, &groups, &now, false).await
}

/// After a dry run that blocked the request: the denied checks that are charged
/// ([`Check::charge`]) record their cost, each slot's in one call of their own, where none
/// blocks another (nothing else of the request is consumed; a check allowed by then is
/// charged as allowed).
async fn charge_denied(
    store: &RedisStore,
    checks: &[Check<'_>],
    keys: &[String],
    now: &str,
    dry: &[Decision],
) -> Result<(), StoreError> {
    let denied: Vec<usize> = (0..checks.len())
        .filter(|&i| {
            let charged = checks
                .get(i)
                .is_some_and(|c| c.charge && c.policy.block_for_us() == 0);
            charged && dry.get(i).is_some_and(|d| !d.allowed)
        })
        .collect();
    let denied_keys: Vec<String> = denied
        .iter()
        .filter_map(|&i| keys.get(i))
        .cloned()
        .collect();
    let charged: Vec<Check<'_>> = (denied.iter().filter_map(|&i| checks.get(i)))
        .map(|c| c.blocking(false))
        .collect();
    let groups = group_by_slot(&denied_keys);
    try_join_all(
        groups
            .iter()
            .map(|group| decide_group(store, &charged, &denied_keys, group, now, false)),
    )
    .await
    .map(drop)
}

/// Decides the checks at `indexes` (keys of one slot) in one stacked script call.
async fn decide_group(
    store: &RedisStore,
    checks: &[Check<'_>],
    keys: &[String],
    indexes: &[usize],
    now: &str,
    dry: bool,
) -> Result<Vec<Decision>, StoreError> {
    let group: Vec<Check<'_>> = indexes
        .iter()
        .filter_map(|&i| checks.get(i))
        .copied()
        .collect();
    let group_keys: Vec<String> = indexes
        .iter()
        .filter_map(|&i| keys.get(i))
        .cloned()
        .collect();
    let reply = store
        .eval(store.scripts().stacked(group_keys, &group, now, dry))
        .await?;
    reply::decisions_from_reply(&group, &reply)
}

/// After a dry run that blocked the request: each group with a blocking check whose denial
/// starts a block (its policy has `block_for`) runs again for real, which writes only
/// the blocks when it is denied again (a group that became allowed between the two calls
/// consumes, as any group of an allowed request would).
async fn start_blocks(
    store: &RedisStore,
    checks: &[Check<'_>],
    keys: &[String],
    groups: &[Vec<usize>],
    now: &str,
    mut decisions: Vec<Decision>,
) -> Result<Vec<Decision>, StoreError> {
    let starts_block = |i: &usize| {
        let denied = decisions.get(*i).is_some_and(|d| !d.allowed);
        checks
            .get(*i)
            .is_some_and(|c| c.blocking && denied && c.policy.block_for_us() > 0)
    };
    let blocking: Vec<&Vec<usize>> = groups
        .iter()
        .filter(|g| g.iter().any(starts_block))
        .collect();
    for group in blocking {
        let again = decide_group(store, checks, keys, group, now, false).await?;
        for (&i, decision) in group.iter().zip(again) {
            if let Some(slot) = decisions.get_mut(i) {
                *slot = decision;
            }
        }
    }
    Ok(decisions)
}

/// Decides every group concurrently and puts the decisions back in the checks' order.
async fn decide_groups(
    store: &RedisStore,
    checks: &[Check<'_>],
    keys: &[String],
    groups: &[Vec<usize>],
    now: &str,
    dry: bool,
) -> Result<Vec<Decision>, StoreError> {
    let replies = try_join_all(
        groups
            .iter()
            .map(|g| decide_group(store, checks, keys, g, now, dry)),
    )
    .await?;
    let mut decisions: Vec<Option<Decision>> = vec![None; checks.len()];
    for (group, replies) in groups.iter().zip(replies) {
        for (&i, decision) in group.iter().zip(replies) {
            if let Some(slot) = decisions.get_mut(i) {
                *slot = Some(decision);
            }
        }
    }
    decisions
        .into_iter()
        .map(|d| d.ok_or_else(|| StoreError::backend("a stacked check got no decision")))
        .collect()
}

/// The indexes of `keys` grouped by hash slot, groups in order of their first key.
fn group_by_slot(keys: &[String]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: HashMap<Slot, usize> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let next = groups.len();
        let g = *group_of.entry(Slot::for_key(key)).or_insert(next);
        if g == next {
            groups.push(Vec::new());
        }
        if let Some(group) = groups.get_mut(g) {
            group.push(i);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_grouped_by_their_hash_tag() {
        let keys: Vec<String> = ["a:{ip}", "b:{key}", "c:{ip}", "d:{other}", "e:{key}"]
            .map(String::from)
            .into();
        assert_eq!(group_by_slot(&keys), vec![vec![0, 2], vec![1, 4], vec![3]]);
    }

    #[test]
    fn debug_and_errors_hide_passwords() {
        let store = RedisStore::cluster(&[
            "redis://u:hunter2@127.0.0.1:7000",
            "redis://u:hunter2@127.0.0.1:7001",
        ])
        .unwrap();
        let debug = format!("{store:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("redis://u:***@127.0.0.1:7000"), "{debug}");
        for nodes in [
            [
                "redis://:hunter2@127.0.0.1:notaport",
                "redis://:hunter2@h:1",
            ],
            ["redis://:hunter2@127.0.0.1:7000", "redis://:pw9@h:1"],
        ] {
            let error = RedisStore::cluster(&nodes).unwrap_err().to_string();
            assert!(
                !error.contains("hunter2") && !error.contains("pw9"),
                "{error}"
            );
            assert!(error.contains("***"), "{error}");
        }
        let empty: [&str; 0] = [];
        assert!(RedisStore::cluster(&empty).is_err());
    }
}
