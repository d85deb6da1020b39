//! The aggregated discovery (ADS, state of the world) client: one stream subscribed to
//! `RateLimitConfig` resources; every response is a whole set, compiled and ACKed, or NACKed
//! with the reason while the configuration in force stays (the reference's
//! `src/provider/xds_grpc_sotw_provider.go`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{value::Kind, Any, Struct, Value};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::backoff::{connection_backoff, MIN_CONNECT_TIMEOUT};
use super::{convert, XdsSource, XdsTls};
use crate::config::RlsConfig;
use crate::source::ConfigSource;
use crate::stats;
use tollgate::ConfigError;

/// The resource type subscribed to.
pub(crate) const TYPE_URL: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The client's task; it ends when this is dropped (with the service).
#[derive(Debug)]
pub(crate) struct XdsTask(tokio::task::JoinHandle<()>);

impl Drop for XdsTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the client on the current Tokio runtime, feeding `config`.
pub(crate) fn spawn(
    source: XdsSource,
    config: &Arc<ConfigSource>,
    merge_domains: bool,
) -> Result<XdsTask, ConfigError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        ConfigError::new("an xDS configuration source is built inside a Tokio runtime")
    })?;
    endpoint(&source)?;
    headers(&source)?;
    let config = Arc::downgrade(config);
    Ok(XdsTask(runtime.spawn(run(source, config, merge_domains))))
}

/// Streams until the service is gone, dialing again after each loss, as the reference's
/// `initXdsClient` (xds_grpc_sotw_provider.go:68-91): the first dial at once, each later one
/// after the [`XdsBackoff`](super::XdsBackoff) wait, whose count of attempts is never reset.
async fn run(source: XdsSource, config: Weak<ConfigSource>, merge_domains: bool) {
    let mut attempt = 0u32;
    loop {
        tracing::info!(target: "tollgate::rls", "connecting to the xDS control plane {}", source.server_url);
        match stream(&source, &config, merge_domains).await {
            Ok(()) => tracing::warn!(
                target: "tollgate::rls",
                "the xDS control plane {} ended the stream", source.server_url
            ),
            Err(e) => tracing::warn!(
                target: "tollgate::rls",
                "xDS control plane {}: {e}", source.server_url
            ),
        }
        if config.strong_count() == 0 {
            return;
        }
        let wait = source.backoff.delay(attempt);
        attempt = attempt.saturating_add(1);
        tracing::info!(target: "tollgate::rls", "connecting to the xDS control plane again in {wait:.2?}");
        tokio::time::sleep(wait).await;
    }
}

/// One stream, from the subscription to its end. Each new stream asks for the current set
/// (an empty version), so a restarted control plane sends it whatever its version numbers.
async fn stream(
    source: &XdsSource,
    config: &Weak<ConfigSource>,
    merge_domains: bool,
) -> Result<(), String> {
    let channel = dial(source).await?;
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    if let Some(bytes) = source.max_message_size {
        client = client.max_decoding_message_size(bytes);
    }
    let (requests, outgoing) = mpsc::channel(4);
    let mut accepted = String::new();
    let _ = requests.try_send(request(source, &accepted, "", None));
    let mut request_stream = tonic::Request::new(ReceiverStream::new(outgoing));
    *request_stream.metadata_mut() = headers(source).map_err(|e| e.to_string())?;
    let mut responses = client
        .stream_aggregated_resources(request_stream)
        .await
        .map_err(|s| format!("cannot open the discovery stream: {}", s.message()))?
        .into_inner();
    loop {
        let response = match responses.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return Ok(()),
            Err(s) => return Err(format!("the discovery stream failed: {}", s.message())),
        };
        let Some(config) = config.upgrade() else {
            return Ok(());
        };
        let reply = answer(source, &config, response, merge_domains, &mut accepted);
        if requests.send(reply).await.is_err() {
            return Err("the discovery stream closed".into());
        }
    }
}

/// Applies a response: the ACK when its set loads (and is now in force), else the NACK with
/// the reason, naming the last version accepted.
fn answer(
    source: &XdsSource,
    config: &ConfigSource,
    response: DiscoveryResponse,
    merge_domains: bool,
    accepted: &mut String,
) -> DiscoveryRequest {
    let version = response.version_info;
    let loaded = compile(response.resources, merge_domains);
    stats::config_load(loaded.is_ok());
    match loaded {
        Ok(rls) => {
            tracing::info!(
                target: "tollgate::rls",
                "xDS configuration version {version:?} loaded: {} domain(s)",
                rls.domains().count()
            );
            config.set(rls);
            *accepted = version;
            request(source, accepted, &response.nonce, None)
        }
        Err(why) => {
            tracing::error!(
                target: "tollgate::rls",
                "xDS configuration version {version:?} not loaded: {why}; keeping the \
                 configuration loaded before"
            );
            let detail = RpcStatus {
                code: tonic::Code::InvalidArgument as i32,
                message: why,
                details: Vec::new(),
            };
            request(source, accepted, &response.nonce, Some(detail))
        }
    }
}

/// A set of resources compiled as files are: an error names the resource and what is wrong.
fn compile(resources: Vec<Any>, merge_domains: bool) -> Result<RlsConfig, String> {
    let mut roots = Vec::with_capacity(resources.len());
    for any in resources {
        if any.type_url != TYPE_URL {
            return Err(format!(
                "a resource of type {:?} where {TYPE_URL} was asked for",
                any.type_url
            ));
        }
        let resource = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| format!("cannot decode a RateLimitConfig: {e}"))?;
        roots.push(convert::to_root(resource));
    }
    RlsConfig::from_roots(roots, merge_domains).map_err(|e| e.to_string())
}

fn request(
    source: &XdsSource,
    version: &str,
    nonce: &str,
    error_detail: Option<RpcStatus>,
) -> DiscoveryRequest {
    let metadata = source.node_metadata.iter().map(|(k, v)| {
        let value = Value {
            kind: Some(Kind::StringValue(v.clone())),
        };
        (k.clone(), value)
    });
    DiscoveryRequest {
        version_info: version.to_owned(),
        node: Some(Node {
            id: source.node_id.clone(),
            metadata: Some(Struct {
                fields: metadata.collect(),
            }),
            user_agent_name: "tollgate-rls".into(),
            ..Node::default()
        }),
        type_url: TYPE_URL.into(),
        response_nonce: nonce.to_owned(),
        error_detail,
        ..DiscoveryRequest::default()
    }
}

/// The control plane's endpoint: a `host:port` gets `https://` with TLS, else `http://`.
fn endpoint(source: &XdsSource) -> Result<Endpoint, ConfigError> {
    let url = &source.server_url;
    let uri = match (url.contains("://"), source.tls.is_some()) {
        (true, _) => url.clone(),
        (false, true) => format!("https://{url}"),
        (false, false) => format!("http://{url}"),
    };
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|e| ConfigError::new(format!("xDS server URL {url:?}: {e}")))?;
    Ok(endpoint
        .connect_timeout(MIN_CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10)))
}

fn headers(source: &XdsSource) -> Result<MetadataMap, ConfigError> {
    let mut map = MetadataMap::new();
    for (name, value) in &source.headers {
        let bad = || ConfigError::new(format!("xDS client header {name:?}: not a valid header"));
        let key =
            MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes()).map_err(|_| bad())?;
        let value = MetadataValue::try_from(value.as_str()).map_err(|_| bad())?;
        map.insert(key, value);
    }
    Ok(map)
}

/// A connection, as the reference's `grpc.Dial(.., grpc.WithBlock())` waits for one
/// (xds_grpc_sotw_provider.go:126-146): attempts until one succeeds, spaced by gRPC's
/// connection back-off, each given at least 20 s and trying every address the name resolves
/// to. An error only when no attempt can be made (the TLS files cannot be read).
async fn dial(source: &XdsSource) -> Result<Channel, String> {
    let mut retries = 0u32;
    loop {
        // Read at each attempt: certificates rotated in place are used from the next one.
        let mut endpoint = endpoint(source).map_err(|e| e.to_string())?;
        if let Some(tls) = &source.tls {
            endpoint = endpoint
                .tls_config(client_tls(tls)?)
                .map_err(|e| format!("TLS: {}", chain(&e)))?;
        }
        let backoff = connection_backoff(retries);
        let deadline = backoff.max(MIN_CONNECT_TIMEOUT);
        let endpoint = endpoint.connect_timeout(deadline);
        let error = match tokio::time::timeout(deadline, endpoint.connect()).await {
            Ok(Ok(channel)) => return Ok(channel),
            Ok(Err(e)) => chain(&e),
            Err(_) => format!("no connection within {deadline:?}"),
        };
        tracing::warn!(
            target: "tollgate::rls",
            "xDS control plane {}: cannot connect: {error}; trying again in {backoff:.2?}",
            source.server_url
        );
        tokio::time::sleep(backoff).await;
        retries = retries.saturating_add(1);
    }
}

/// The TLS settings, from files read now.
fn client_tls(tls: &XdsTls) -> Result<ClientTlsConfig, String> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new();
    config = match &tls.server_ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca)?)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// An error and its causes, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::ratelimit::config::ratelimit::v3::{
        RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
    };

    use super::*;

    fn resource(domain: &str, unit: RateLimitUnit) -> Any {
        let config = RateLimitConfig {
            name: format!("{domain}.res"),
            domain: domain.into(),
            descriptors: vec![RateLimitDescriptor {
                key: "k".into(),
                rate_limit: Some(RateLimitPolicy {
                    unit: unit as i32,
                    requests_per_unit: 3,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            }],
        };
        Any {
            type_url: TYPE_URL.into(),
            value: config.encode_to_vec(),
        }
    }

    fn response(version: &str, nonce: &str, resources: Vec<Any>) -> DiscoveryResponse {
        DiscoveryResponse {
            version_info: version.into(),
            resources,
            type_url: TYPE_URL.into(),
            nonce: nonce.into(),
            ..DiscoveryResponse::default()
        }
    }

    #[test]
    fn a_set_that_loads_is_acked_one_that_does_not_is_nacked_and_the_last_good_stays() {
        let source = XdsSource::new("localhost:18000").node_id("envoy-ratelimit");
        let config = ConfigSource::fed();
        let mut accepted = String::new();
        assert!(!config.loaded());

        let good = response("1", "a", vec![resource("edge", RateLimitUnit::Minute)]);
        let ack = answer(&source, &config, good, false, &mut accepted);
        assert_eq!(
            (ack.version_info.as_str(), ack.response_nonce.as_str()),
            ("1", "a")
        );
        assert_eq!(ack.error_detail, None);
        assert_eq!(ack.node.unwrap().id, "envoy-ratelimit");
        assert!(config.loaded());
        assert_eq!(config.current().domains().collect::<Vec<_>>(), ["edge"]);

        let bad = response("2", "b", vec![resource("other", RateLimitUnit::Unknown)]);
        let nack = answer(&source, &config, bad, false, &mut accepted);
        assert_eq!(
            (nack.version_info.as_str(), nack.response_nonce.as_str()),
            ("1", "b")
        );
        let detail = nack.error_detail.unwrap();
        assert_eq!(
            detail.message,
            "other.res: invalid rate limit unit 'UNKNOWN'"
        );
        assert_eq!(detail.code, tonic::Code::InvalidArgument as i32);
        assert_eq!(config.current().domains().collect::<Vec<_>>(), ["edge"]);

        let undecodable = Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff],
        };
        let nack = answer(
            &source,
            &config,
            response("3", "c", vec![undecodable]),
            false,
            &mut accepted,
        );
        assert!(nack
            .error_detail
            .unwrap()
            .message
            .starts_with("cannot decode a RateLimitConfig"));

        // An empty set is a configuration with no domain, as the reference loads it.
        let ack = answer(
            &source,
            &config,
            response("4", "d", Vec::new()),
            false,
            &mut accepted,
        );
        assert_eq!(ack.error_detail, None);
        assert!(config.current().is_empty() && config.loaded());
    }

    #[tokio::test]
    async fn no_configuration_loaded_is_the_references_error() {
        use crate::proto::{rate_limit_descriptor::Entry, RateLimitDescriptor, RateLimitRequest};
        use crate::RateLimitService;

        // Nothing listens there: the service answers without a configuration.
        let service = RateLimitService::builder()
            .config_xds(XdsSource::new("127.0.0.1:9"))
            .build()
            .unwrap();
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "k".into(),
                    value: "v".into(),
                }],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        };
        let e = service.decide(&request).await.unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (tonic::Code::Unknown, "no rate limit configuration loaded")
        );
        assert!(!service.config_loaded());
        // The reference's checks of the request come first (service.go).
        let empty = RateLimitRequest {
            domain: String::new(),
            ..request
        };
        assert_eq!(
            service.decide(&empty).await.unwrap_err().message(),
            "rate limit domain must not be empty"
        );
    }
}
