//! [`OnConnection`]: what a Redis store runs on its connection.

use std::future::Future;

use deadpool_redis::redis::aio::ConnectionLike;
use deadpool_redis::redis::RedisResult;

/// What runs on a connection: a script call ([`Call`](super::script::Call)) or a pipeline of
/// plain commands ([`Pipe`](super::counters::Pipe)).
pub(crate) trait OnConnection {
    /// What it returns.
    type Output;

    /// Runs it on `connection`.
    fn run_on<C: ConnectionLike + Send>(
        &self,
        connection: &mut C,
    ) -> impl Future<Output = RedisResult<Self::Output>> + Send;
}
