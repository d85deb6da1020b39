//! Test helpers for Envoy Gateway's setting: a certificate authority made with openssl, and an
//! xDS control plane (the aggregated discovery service, state of the world) over mutual TLS
//! that pushes `RateLimitConfig` sets and records every ACK and NACK and when each stream was
//! opened, on a runtime of its own so that stopping it cuts its streams as a killed process
//! would; it can also end its streams while it keeps listening.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message as _;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

pub(crate) const TYPE_URL: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Certificates signed by one CA (and one by a CA nobody trusts), in a directory.
pub(crate) struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub(crate) fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tollgate-pki-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Self { dir };
        pki.ca("ca");
        pki.ca("rogue-ca");
        // tollgate-rls: its gRPC server's certificate, and its client certificate towards
        // the control plane (Envoy Gateway mounts one certificate for both).
        pki.leaf(
            "ca",
            "rls",
            "rls",
            "DNS:localhost,IP:127.0.0.1",
            "serverAuth,clientAuth",
        );
        pki.leaf(
            "ca",
            "control-plane",
            "envoy-gateway",
            "DNS:localhost,IP:127.0.0.1",
            "serverAuth",
        );
        pki.leaf("ca", "envoy", "envoy", "DNS:envoy", "clientAuth");
        pki.leaf("ca", "other", "other", "DNS:other", "clientAuth");
        pki.leaf("rogue-ca", "rogue", "envoy", "DNS:envoy", "clientAuth");
        pki
    }

    pub(crate) fn path(&self, file: &str) -> String {
        self.dir.join(file).to_string_lossy().into_owned()
    }

    pub(crate) fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(file)).unwrap()
    }

    fn ca(&self, name: &str) {
        openssl(
            &self.dir,
            &format!(
                "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
                 -keyout {name}.key -out {name}.crt -subj /CN={name} \
                 -addext basicConstraints=critical,CA:TRUE \
                 -addext keyUsage=critical,keyCertSign,cRLSign"
            ),
        );
    }

    /// `name.crt` and `name.key`, signed by `ca`, for the names `san`.
    pub(crate) fn leaf(&self, ca: &str, name: &str, cn: &str, san: &str, usage: &str) {
        openssl(
            &self.dir,
            &format!(
                "req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
                 -keyout {name}.key -out {name}.csr -subj /CN={cn}"
            ),
        );
        std::fs::write(
            self.dir.join(format!("{name}.ext")),
            format!("subjectAltName={san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"),
        )
        .unwrap();
        openssl(
            &self.dir,
            &format!(
                "x509 -req -in {name}.csr -CA {ca}.crt -CAkey {ca}.key -CAcreateserial \
                 -days 2 -out {name}.crt -extfile {name}.ext"
            ),
        );
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn openssl(dir: &Path, args: &str) {
    let out = Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What tollgate-rls sent back for a response: the version it names and the error, if a NACK.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reply {
    pub nonce: String,
    pub version: String,
    pub error: Option<String>,
}

#[derive(Default)]
struct Log {
    replies: Mutex<Vec<Reply>>,
    nodes: Mutex<Vec<String>>,
    subscriptions: Mutex<Vec<Instant>>,
}

/// The control plane: its current set (a version and its resources), pushed to every stream.
pub(crate) struct ControlPlane {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    snapshot: watch::Sender<Option<(String, Vec<RateLimitConfig>)>>,
    cuts: watch::Sender<u64>,
    log: Arc<Log>,
}

impl ControlPlane {
    /// Serves on `addr` (mutual TLS: its certificate from `pki`, clients signed by its CA).
    pub(crate) fn start(addr: SocketAddr, pki: &Pki) -> Self {
        Self::start_in(addr, &pki.dir)
    }

    /// [`start`](Self::start) with the certificates of the directory `pki`.
    pub(crate) fn start_in(addr: SocketAddr, pki: &Path) -> Self {
        let read = |file: &str| std::fs::read(pki.join(file)).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (snapshot, _) = watch::channel(None);
        let (cuts, _) = watch::channel(0);
        let log = Arc::new(Log::default());
        let service = Ads {
            snapshot: snapshot.clone(),
            cuts: cuts.clone(),
            log: Arc::clone(&log),
        };
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(
                read("control-plane.crt"),
                read("control-plane.key"),
            ))
            .client_ca_root(Certificate::from_pem(read("ca.crt")));
        let listener = std::net::TcpListener::bind(addr).expect("bind the control plane");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            Server::builder()
                .tls_config(tls)
                .unwrap()
                .add_service(AggregatedDiscoveryServiceServer::new(service))
                .serve_with_incoming(incoming)
                .await
                .unwrap();
        });
        Self {
            addr,
            runtime: Some(runtime),
            snapshot,
            cuts,
            log,
        }
    }

    /// Pushes a new set to every stream, and to streams opened from now on.
    pub(crate) fn push(&self, version: &str, resources: Vec<RateLimitConfig>) {
        self.snapshot
            .send_replace(Some((version.to_owned(), resources)));
    }

    pub(crate) fn replies(&self) -> Vec<Reply> {
        self.log.replies.lock().unwrap().clone()
    }

    pub(crate) fn nodes(&self) -> Vec<String> {
        self.log.nodes.lock().unwrap().clone()
    }

    /// When each stream was opened (its first request came), in order.
    pub(crate) fn subscriptions(&self) -> Vec<Instant> {
        self.log.subscriptions.lock().unwrap().clone()
    }

    /// Ends every open stream with `UNAVAILABLE`, as a control plane that drops its clients
    /// does, and keeps listening; the instant it did.
    pub(crate) fn cut_streams(&self) -> Instant {
        let now = Instant::now();
        self.cuts.send_modify(|n| *n += 1);
        now
    }

    /// Stops at once, cutting every stream (its runtime goes, with its tasks).
    pub(crate) fn kill(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

struct Ads {
    snapshot: watch::Sender<Option<(String, Vec<RateLimitConfig>)>>,
    cuts: watch::Sender<u64>,
    log: Arc<Log>,
}

type ResponseStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ResponseStream<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = ResponseStream<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let mut requests = request.into_inner();
        let mut snapshot = self.snapshot.subscribe();
        let mut cuts = self.cuts.subscribe();
        let log = Arc::clone(&self.log);
        let (responses, outgoing) = mpsc::channel(8);
        tokio::spawn(async move {
            let mut nonce = 0u64;
            let mut subscribed = false;
            loop {
                tokio::select! {
                    request = requests.message() => {
                        let Ok(Some(request)) = request else { return };
                        assert_eq!(request.type_url, TYPE_URL);
                        if let Some(node) = &request.node {
                            log.nodes.lock().unwrap().push(node.id.clone());
                        }
                        if !subscribed {
                            log.subscriptions.lock().unwrap().push(Instant::now());
                        }
                        if !request.response_nonce.is_empty() {
                            log.replies.lock().unwrap().push(Reply {
                                nonce: request.response_nonce.clone(),
                                version: request.version_info.clone(),
                                error: request.error_detail.map(|e| e.message),
                            });
                            continue;
                        }
                        subscribed = true;
                        snapshot.mark_changed();
                    }
                    _ = cuts.changed() => {
                        let _ = responses.send(Err(Status::unavailable("cut by the test"))).await;
                        return;
                    }
                    changed = snapshot.changed(), if subscribed => {
                        if changed.is_err() { return }
                        let Some((version, resources)) = snapshot.borrow_and_update().clone() else {
                            continue;
                        };
                        nonce += 1;
                        let response = DiscoveryResponse {
                            version_info: version,
                            resources: resources.iter().map(|r| Any {
                                type_url: TYPE_URL.into(),
                                value: r.encode_to_vec(),
                            }).collect(),
                            type_url: TYPE_URL.into(),
                            nonce: nonce.to_string(),
                            ..DiscoveryResponse::default()
                        };
                        if responses.send(Ok(response)).await.is_err() { return }
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(outgoing))))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}

/// A set of one domain whose only limit is `key` at `per_minute` requests a minute.
pub(crate) fn limit(domain: &str, key: &str, per_minute: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: format!("{domain}-{key}"),
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(RateLimitPolicy {
                unit: RateLimitUnit::Minute as i32,
                requests_per_unit: per_minute,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        }],
    }
}
