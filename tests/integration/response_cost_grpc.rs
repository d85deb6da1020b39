//! A rule priced by the response in front of a real tonic server, called by a real tonic
//! client over loopback: the cost read from the response metadata, or from the trailers a
//! call ends with, and RESOURCE_EXHAUSTED once the budget is spent.

#![cfg(feature = "tonic")]

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame};
use tollgate::rules::{ResponseCost, Rule};
use tollgate::{key, Algorithm, Quota, RateLimitLayer};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tower::{Layer, Service};

/// Stands in for a model behind gRPC: answers the request's `x-usage` metadata as the
/// response's `x-usage-tokens` metadata, or, with `x-in-trailers`, in the trailers.
#[derive(Clone)]
struct Usage<S>(S);

impl<S> Layer<S> for UsageLayer {
    type Service = Usage<S>;

    fn layer(&self, inner: S) -> Usage<S> {
        Usage(inner)
    }
}

#[derive(Clone)]
struct UsageLayer;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> Service<Request<B>> for Usage<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = Response<UsageBody<R>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let usage = request.headers().get("x-usage").cloned();
        let in_trailers = request.headers().contains_key("x-in-trailers");
        let answer = self.0.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            if let Some(usage) = usage.clone().filter(|_| !in_trailers) {
                response.headers_mut().insert("x-usage-tokens", usage);
            }
            let usage = usage.filter(|_| in_trailers);
            Ok(response.map(|body| UsageBody { body, usage }))
        })
    }
}

/// The body with `usage` added to its trailers.
struct UsageBody<B> {
    body: B,
    usage: Option<HeaderValue>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for UsageBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(mut frame))) = polled {
            if let Some(trailers) = frame.trailers_mut() {
                if let Some(usage) = self.usage.take() {
                    trailers.insert("x-usage-tokens", usage);
                }
            }
            return Poll::Ready(Some(Ok(frame)));
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

/// The health service behind the token budget, on a free loopback port.
async fn serve(layer: RateLimitLayer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_, health) = tonic_health::server::health_reporter();
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .layer(UsageLayer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

/// A Check of `key` whose answer costs `usage`, told in the metadata or the trailers: its
/// code and what its `ratelimit` metadata says is left.
async fn check(
    client: &mut HealthClient<Channel>,
    key: &str,
    usage: &str,
    in_trailers: bool,
) -> (Code, Option<u64>) {
    let mut request = tonic::Request::new(HealthCheckRequest::default());
    let metadata = request.metadata_mut();
    metadata.insert("x-api-key", key.parse().unwrap());
    metadata.insert("x-usage", usage.parse().unwrap());
    if in_trailers {
        metadata.insert("x-in-trailers", "1".parse().unwrap());
    }
    let (code, metadata) = match client.check(request).await {
        Ok(response) => (Code::Ok, response.metadata().clone()),
        Err(status) => (status.code(), status.metadata().clone()),
    };
    let left = metadata.get("ratelimit").and_then(|v| {
        let value = v.to_str().ok()?;
        value.split(";r=").nth(1)?.split(';').next()?.parse().ok()
    });
    (code, left)
}

#[tokio::test]
async fn a_grpc_answer_is_settled_at_the_cost_in_its_metadata_or_trailers() {
    let rule = Rule::new("tokens", Quota::per_day(1000).unwrap())
        .algorithm(Algorithm::FixedWindow)
        .cost_from_response(ResponseCost::header("x-usage-tokens").estimate(100));
    let layer = RateLimitLayer::builder()
        .key(key::Header::new("x-api-key"))
        .rule(rule)
        .build()
        .unwrap();
    let addr = serve(layer).await;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    // In the metadata: settled before the answer, whose metadata tells what is left after it.
    assert_eq!(
        check(&mut client, "g", "30", false).await,
        (Code::Ok, Some(970))
    );
    // In the trailers: settled at 50 (not the estimate of 100) when the call ends, and the
    // trailers tell what is left then (tonic merges them into a unary call's metadata).
    assert_eq!(
        check(&mut client, "g", "50", true).await,
        (Code::Ok, Some(920))
    );
    assert_eq!(
        check(&mut client, "g", "0", false).await,
        (Code::Ok, Some(920))
    );
    // Past the budget (clamped to it): charged while over, then RESOURCE_EXHAUSTED.
    assert_eq!(
        check(&mut client, "g", "5000", false).await,
        (Code::Ok, Some(0))
    );
    let (code, left) = check(&mut client, "g", "1", false).await;
    assert_eq!((code, left), (Code::ResourceExhausted, Some(0)));
}
