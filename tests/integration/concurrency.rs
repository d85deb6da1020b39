//! Exactness under contention: many tasks, one key, exactly `limit` allowed.

use std::sync::Arc;

use tollgate::store::MemoryStore;
use tollgate::{
    store::{Policy, Store},
    Algorithm, Quota,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_on_one_key_get_exactly_the_limit() {
    for algorithm in Algorithm::ALL {
        for round in 0..5 {
            let store = MemoryStore::new();
            let policy =
                Arc::new(Policy::new("c", Quota::per_minute(10).unwrap(), algorithm).unwrap());
            let barrier = Arc::new(tokio::sync::Barrier::new(64));
            let tasks: Vec<_> = (0..64)
                .map(|_| {
                    let (store, policy, barrier) =
                        (store.clone(), Arc::clone(&policy), Arc::clone(&barrier));
                    tokio::spawn(async move {
                        barrier.wait().await;
                        store.check("one-key", &policy, 1).await.unwrap().allowed
                    })
                })
                .collect();
            let mut allowed = 0;
            for task in tasks {
                allowed += usize::from(task.await.unwrap());
            }
            assert_eq!(allowed, 10, "{algorithm}, round {round}");
        }
    }
}
