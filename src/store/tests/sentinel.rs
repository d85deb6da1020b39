//! The Redis store on the master a real sentinel names: leases and refunds go there too.

use std::time::Duration;

use super::leases::leases_are_exact;
use super::support::RedisSentinel;
use crate::store::contract::StoreExt;
use crate::store::{RedisStore, Store};
use crate::{store::Policy, Algorithm, Quota};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_and_refunds_go_to_the_master() {
    let redis = RedisSentinel::start();
    let store = RedisStore::sentinel(&[redis.sentinel_url()], RedisSentinel::MASTER_NAME).unwrap();
    leases_are_exact(&store, "leased").await;

    let login = Policy::new("login", Quota::per_minute(2).unwrap(), Algorithm::Gcra)
        .unwrap()
        .with_block_for(Duration::from_secs(60));
    let check = async || store.check("eve", &login, 1).await.unwrap();
    assert_eq!((check().await.allowed, check().await.allowed), (true, true));
    assert!(!check().await.allowed);
    store.reset("eve", &login).await.unwrap();
    assert_eq!(check().await.remaining, 1);
    store.refund("eve", &login, 1).await.unwrap();
    assert_eq!(check().await.remaining, 1);
}
