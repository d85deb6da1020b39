//! [`StateAccess`]: how one decision reads and writes a key's state on either form of state store,
//! a [`StateStore`] by compare-and-set tries, an [`AtomicStateStore`] in one update.

use std::future::Future;

use tokio::sync::Mutex;

use super::{AtomicStateStore, StateStore, Update, MAX_ATTEMPTS};
use crate::error::StoreError;

/// The state a decision reads and writes, on either form of state store behind one seam, so that
/// [`StateBacked`](super::StateBacked) has one decision loop for both.
pub(crate) trait StateAccess: Send + Sync + 'static {
    /// Lets `decide` read `key`'s state (`None`: none) and stores the update it returns as one
    /// change of the key, with nothing written in between; returns `decide`'s answer. `turn` is
    /// the key's turn in this instance, for a form that needs one.
    fn apply<T: Send>(
        &self,
        key: &str,
        turn: &Mutex<()>,
        decide: impl FnMut(Option<&[u8]>) -> Result<(Update, T), StoreError> + Send,
    ) -> impl Future<Output = Result<T, StoreError>> + Send;

    /// Forgets `key`'s state.
    fn forget(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Read, decide, write if unchanged; else again on the newer state, [`MAX_ATTEMPTS`] in all.
/// Decisions of one key take their turn, so that they never write over each other's reads.
impl<S: StateStore> StateAccess for S {
    async fn apply<T: Send>(
        &self,
        key: &str,
        turn: &Mutex<()>,
        mut decide: impl FnMut(Option<&[u8]>) -> Result<(Update, T), StoreError> + Send,
    ) -> Result<T, StoreError> {
        // Held until the decision is made, or dropped with it if it is cancelled.
        let _turn = turn.lock().await;
        for _ in 0..MAX_ATTEMPTS {
            let read = self.get(key).await?;
            match decide(read.as_ref().map(|r| r.bytes.as_slice()))? {
                (Update::Keep, answer) => return Ok(answer),
                (Update::Set { bytes, ttl }, answer) => {
                    let expected = read.map(|r| r.version);
                    if self.set(key, &bytes, expected, ttl).await? {
                        return Ok(answer);
                    }
                }
            }
        }
        Err(StoreError::key_state(format!(
            "the state of {key} changed under {MAX_ATTEMPTS} tries in a row"
        )))
    }

    async fn forget(&self, key: &str) -> Result<(), StoreError> {
        self.delete(key).await
    }
}

/// An [`AtomicStateStore`] as a [`StateAccess`]: each decision is made inside one update, on the
/// state the backend holds for it, so there is nothing to retry and no turn to take.
#[derive(Clone)]
pub(crate) struct Atomic<A>(pub(crate) A);

impl<A: AtomicStateStore> StateAccess for Atomic<A> {
    async fn apply<T: Send>(
        &self,
        key: &str,
        _turn: &Mutex<()>,
        mut decide: impl FnMut(Option<&[u8]>) -> Result<(Update, T), StoreError> + Send,
    ) -> Result<T, StoreError> {
        // The answer of the last call, the one whose update the backend applies.
        let mut answer = None;
        self.0
            .update(key, |state| {
                let (update, decided) = match decide(state) {
                    Ok((update, decided)) => (update, Ok(decided)),
                    // State it cannot read is left as it is.
                    Err(e) => (Update::Keep, Err(e)),
                };
                answer = Some(decided);
                update
            })
            .await?;
        answer.unwrap_or_else(|| {
            Err(StoreError::backend(format!(
                "the update of {key} returned without reading its state"
            )))
        })
    }

    async fn forget(&self, key: &str) -> Result<(), StoreError> {
        self.0.delete(key).await
    }
}
