//! The store methods every Redis store shares: each is one call of one script (see
//! [`Scripts`]) on the store's connection, whatever that connection is (standalone, Sentinel's
//! master, a cluster). The stores forward their [`Store`](crate::store::Store) methods here.

use std::future::Future;
use std::sync::Arc;

use super::script::{self, Call, Control, Scripts};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::lease::Lease;
use crate::quota::Policy;
use crate::store::check::Check;
use crate::store::grant::Grant;

/// A Redis store as the shared methods see it: where its keys live, which clock its scripts
/// read, and how a call runs on its connection.
pub(crate) trait ScriptRunner: Sync {
    /// The key prefix (`tollgate` by default).
    fn key_prefix(&self) -> &str;

    /// The clock sent with every call, or `None` for Redis `TIME`.
    fn script_clock(&self) -> Option<&Arc<dyn Clock>>;

    /// The scripts, with their SHA-1s.
    fn scripts(&self) -> &Scripts;

    /// Runs `call` on the store's connection.
    fn eval(&self, call: Call<'_>) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;
}

/// The Redis key that holds `client_key`'s state under `policy`.
fn state_key(store: &impl ScriptRunner, policy: &Policy, client_key: &str) -> String {
    script::state_key(store.key_prefix(), policy, client_key)
}

/// The `now` argument of every script: the store clock's µs, or `""` for Redis `TIME`.
pub(crate) fn now(store: &impl ScriptRunner) -> String {
    store
        .script_clock()
        .map_or_else(String::new, |c| c.now().to_string())
}

/// One request of `cost`: one call of the algorithm's script.
pub(crate) async fn check(
    store: &impl ScriptRunner,
    key: &str,
    policy: &Policy,
    cost: u32,
) -> Result<Decision, StoreError> {
    decide(store, key, policy, cost, false).await
}

/// One dry run of the algorithm's script (see `lua/gcra.lua`, `ARGV[7]`): one round trip,
/// nothing written.
pub(crate) async fn peek(
    store: &impl ScriptRunner,
    key: &str,
    policy: &Policy,
    cost: u32,
) -> Result<Decision, StoreError> {
    decide(store, key, policy, cost, true).await
}

/// [`check`], or [`peek`] when `dry`.
async fn decide(
    store: &impl ScriptRunner,
    key: &str,
    policy: &Policy,
    cost: u32,
    dry: bool,
) -> Result<Decision, StoreError> {
    let key = state_key(store, policy, key);
    let now = now(store);
    let scripts = store.scripts();
    let call = match dry {
        false => scripts.single(key, policy, cost, &now),
        true => scripts.peek(key, policy, cost, &now),
    };
    let reply = store.eval(call).await?;
    script::decision_from_reply(policy.params().burst, &reply)
}

/// One request against several limits in one round trip: one `EVALSHA` of the stacked script
/// (see `lua/stacked.lua`), which decides every check at the same instant, dry, and stores the
/// allowed ones only if no blocking check was denied. A single check runs its algorithm's own
/// script, as [`check`] does. Atomic wherever one script may touch every key: always on a
/// standalone Redis, within one hash slot on a cluster.
pub(crate) async fn check_stacked(
    store: &impl ScriptRunner,
    checks: &[Check<'_>],
) -> Result<Vec<Decision>, StoreError> {
    match checks {
        [] => return Ok(Vec::new()),
        [one] if !one.charge => {
            return Ok(vec![check(store, one.key, one.policy, one.cost).await?])
        }
        _ => {}
    }
    let keys: Vec<String> = checks
        .iter()
        .map(|c| state_key(store, c.policy, c.key))
        .collect();
    let now = now(store);
    let reply = store
        .eval(store.scripts().stacked(keys, checks, &now, false))
        .await?;
    script::decisions_from_reply(checks, &reply)
}

/// Reset, block or refund one client: one call of `lua/control.lua`.
pub(crate) async fn act(
    store: &impl ScriptRunner,
    key: &str,
    policy: &Policy,
    action: Control,
) -> Result<(), StoreError> {
    let key = state_key(store, policy, key);
    let now = now(store);
    store
        .eval(store.scripts().control(key, policy, action, &now))
        .await
        .map(drop)
}

/// A lease of `min` to `max` units: one call of `lua/lease.lua`. An algorithm that does not
/// lease decides `min` units as one request.
pub(crate) async fn acquire(
    store: &impl ScriptRunner,
    key: &str,
    policy: &Policy,
    min: u32,
    max: u32,
) -> Result<Grant, StoreError> {
    if !Lease::ALGORITHMS.contains(&policy.algorithm()) {
        let decision = check(store, key, policy, min).await?;
        return Ok(Grant::new(
            if decision.allowed { min } else { 0 },
            decision,
            0,
        ));
    }
    let key = state_key(store, policy, key);
    let now = now(store);
    let reply = store
        .eval(store.scripts().acquire(key, policy, (min, max), &now))
        .await?;
    script::grant_from_reply(policy.params().burst, &reply)
}

/// Gives back `unused` units of `grant`: one call of `lua/lease.lua`.
pub(crate) async fn release(
    store: &impl ScriptRunner,
    key: &str,
    policy: &Policy,
    unused: u32,
    grant: &Grant,
) -> Result<u32, StoreError> {
    if !Lease::ALGORITHMS.contains(&policy.algorithm()) || unused == 0 {
        return Ok(0);
    }
    let key = state_key(store, policy, key);
    let now = now(store);
    let reply = store
        .eval(
            store
                .scripts()
                .release(key, policy, (unused, grant.mark), &now),
        )
        .await?;
    script::released_from_reply(&reply)
}
