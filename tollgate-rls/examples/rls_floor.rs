//! The floor for `scripts/bench_rls.sh`: a bare tonic `ShouldRateLimit` server that answers
//! `OK` for every descriptor without deciding anything, on one runtime thread, so that a rate
//! limit service can be compared with what gRPC over loopback costs by itself.
//!
//! `cargo run --release --example rls_floor -- [ADDR]` (default `127.0.0.1:0`); prints
//! `listening on ADDR` once it accepts connections.

use std::io::Write as _;

use tollgate_rls::proto::rate_limit_response::{Code, DescriptorStatus};
use tollgate_rls::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use tollgate_rls::proto::{RateLimitRequest, RateLimitResponse};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

/// Answers `OK`, one status per descriptor, as a service that allows everything would.
struct Floor;

#[tonic::async_trait]
impl RateLimitService for Floor {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let statuses = (request.get_ref().descriptors.iter())
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            })
            .collect();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..RateLimitResponse::default()
        }))
    }
}

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind");
        println!("listening on {}", listener.local_addr().expect("address"));
        let _ = std::io::stdout().flush();
        Server::builder()
            .tcp_nodelay(true)
            .add_service(RateLimitServiceServer::new(Floor))
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)))
            .await
            .expect("serve");
    });
}
