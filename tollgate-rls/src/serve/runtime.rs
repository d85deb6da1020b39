//! The async runtime the server runs on, and how many worker threads it gets.
//!
//! `TOKIO_WORKER_THREADS` chooses; unset, a process that may use at most two cores (its CPU
//! quota counted, as `std::thread::available_parallelism` counts it) runs on one thread, and
//! a larger one gets tokio's default, a worker per core. One worker is a current-thread
//! runtime: every task on one thread, with no hand-off between threads. Envoy keeps a few
//! long-lived HTTP/2 connections open to its rate limit service, and every request of a
//! connection goes through that connection's h2 state behind one lock: with two workers
//! the request tasks and the connection's task wake each other across threads and meet on
//! that lock, which costs more CPU per decision (about a third more, measured in
//! BENCHMARKS.md) and a longer tail than the second core gives back, when that core is also
//! where the proxy, Redis or the neighbours run. limitador-server serves the same way.

use std::num::NonZeroUsize;

/// Up to this many usable cores, the default is one worker thread.
pub(crate) const ONE_WORKER_UP_TO_CORES: usize = 2;

/// How many worker threads: `chosen` (`TOKIO_WORKER_THREADS`) if set, else one when the
/// process may use at most [`ONE_WORKER_UP_TO_CORES`] cores, else `None` (one per core).
pub(crate) fn worker_threads(chosen: Option<usize>, cores: Option<NonZeroUsize>) -> Option<usize> {
    match (chosen, cores) {
        (Some(threads), _) => Some(threads),
        (None, Some(cores)) if cores.get() <= ONE_WORKER_UP_TO_CORES => Some(1),
        (None, _) => None,
    }
}

/// The runtime for `chosen` worker threads (see [`worker_threads`]).
pub(crate) fn build(chosen: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().ok();
    let mut runtime = match worker_threads(chosen, cores) {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(threads) => {
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            runtime.worker_threads(threads);
            runtime
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    runtime.enable_all().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(n: usize) -> Option<NonZeroUsize> {
        NonZeroUsize::new(n)
    }

    #[test]
    fn one_worker_on_two_cores_or_fewer() {
        assert_eq!(worker_threads(None, cores(1)), Some(1));
        assert_eq!(worker_threads(None, cores(2)), Some(1));
        assert_eq!(worker_threads(None, cores(3)), None);
        assert_eq!(worker_threads(None, cores(16)), None);
        // Unknown: tokio's default, which asks the same question and falls back to one.
        assert_eq!(worker_threads(None, None), None);
    }

    #[test]
    fn the_variable_wins() {
        assert_eq!(worker_threads(Some(2), cores(2)), Some(2));
        assert_eq!(worker_threads(Some(1), cores(16)), Some(1));
        assert_eq!(worker_threads(Some(8), None), Some(8));
    }

    #[test]
    fn one_worker_is_a_current_thread_runtime() {
        let runtime = build(Some(1)).unwrap();
        assert_eq!(
            runtime.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::CurrentThread
        );
        let runtime = build(Some(2)).unwrap();
        assert_eq!(
            runtime.handle().runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        );
        assert_eq!(runtime.metrics().num_workers(), 2);
    }
}
