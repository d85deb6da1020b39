//! One connection taken from a pool once and reused by every decision.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use deadpool_redis::redis::aio::ConnectionLike;

use super::on_connection::OnConnection;
use super::reply;
use crate::error::StoreError;

/// Taking a connection, its type erased.
type Connecting<'a, C> = Pin<Box<dyn Future<Output = Result<C, StoreError>> + Send + 'a>>;

/// A multiplexed connection (standalone, Sentinel's master, or a cluster connection) kept
/// between decisions: checking a connection out of a deadpool pool costs a `PING` round trip,
/// which would double the cost of a decision. Forgotten after an error that may have broken
/// it, or a call on it that was given up, so the next decision takes a fresh one.
pub(crate) struct CachedConnection<C> {
    kept: Mutex<Option<C>>,
    /// Held while taking a connection, so that the requests that find none (at start, after
    /// an outage) wait for one connection instead of each opening its own.
    connecting: tokio::sync::Mutex<()>,
}

impl<C: ConnectionLike + Clone + Send> CachedConnection<C> {
    pub(crate) fn new() -> Self {
        Self {
            kept: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs `work` on the kept connection, taking one by `connect` first if none is kept.
    pub(crate) async fn run<W, F, Fut>(&self, work: W, connect: F) -> Result<W::Output, StoreError>
    where
        W: OnConnection,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, StoreError>> + Send,
    {
        let cached = self.lock().clone();
        let mut connection = match cached {
            Some(connection) => connection,
            None => {
                let _connecting = self.connecting.lock().await;
                // Another request may have connected while this one waited.
                let cached = self.lock().clone();
                match cached {
                    Some(connection) => connection,
                    None => {
                        // Boxed, its type erased: connecting is rare, and a pool's connect
                        // future is deep enough to overflow the compiler's trait checks in
                        // every decision future that would hold it.
                        let connecting: Connecting<'_, C> = Box::pin(connect());
                        let connection = connecting.await?;
                        *self.lock() = Some(connection.clone());
                        connection
                    }
                }
            }
        };
        work.run_on(&mut connection).await.map_err(|e| {
            if reply::breaks_connection(&e) {
                self.forget();
            }
            reply::store_error(e)
        })
    }

    /// Drops the kept connection, so that the next call takes one from the pool: for a call on
    /// it that was given up, which may be waiting on a connection that will never answer.
    /// Calls already under way on it keep their clone.
    pub(crate) fn forget(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<C>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
