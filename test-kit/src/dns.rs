//! A DNS server on loopback that answers SRV queries with the servers a test gives it, so that
//! discovery by SRV record runs against a real name server.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::SRV;
use hickory_proto::rr::{Name, RData, Record, RecordType};

/// Answers every SRV query for any name with its servers (`ip:port`, as SRV targets with a time
/// to live of zero); any other query with no record. Stops when dropped.
#[derive(Debug)]
pub struct SrvServer {
    address: SocketAddr,
    servers: Arc<Mutex<Vec<SocketAddr>>>,
    queries: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl SrvServer {
    /// A server on a free UDP port of 127.0.0.1, naming `servers`.
    pub fn start(servers: &[SocketAddr]) -> Self {
        Self::start_at("127.0.0.1:0", servers)
    }

    /// A server on `address` (`127.0.0.1:53` for a process that reads its name server from a
    /// `resolv.conf`, which names no port), naming `servers`.
    pub fn start_at(address: &str, servers: &[SocketAddr]) -> Self {
        let socket = UdpSocket::bind(address).expect("bind the DNS server's UDP port");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let address = socket.local_addr().expect("local address");
        let this = Self {
            address,
            servers: Arc::new(Mutex::new(servers.to_vec())),
            queries: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (servers, queries, stop) = (
            Arc::clone(&this.servers),
            Arc::clone(&this.queries),
            Arc::clone(&this.stop),
        );
        std::thread::spawn(move || {
            let mut buffer = [0; 1500];
            while !stop.load(Ordering::Relaxed) {
                let Ok((n, from)) = socket.recv_from(&mut buffer) else {
                    continue;
                };
                let Ok(query) = Message::from_vec(&buffer[..n]) else {
                    continue;
                };
                queries.fetch_add(1, Ordering::Relaxed);
                let servers = servers.lock().expect("servers").clone();
                if let Ok(bytes) = answer(&query, &servers).to_vec() {
                    let _ = socket.send_to(&bytes, from);
                }
            }
        });
        this
    }

    /// Where it listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Names `servers` from now on (none: answers with no record).
    pub fn set(&self, servers: &[SocketAddr]) {
        *self.servers.lock().expect("servers") = servers.to_vec();
    }

    /// How many queries it has answered.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::Relaxed)
    }
}

impl Drop for SrvServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn answer(query: &Message, servers: &[SocketAddr]) -> Message {
    let mut response = Message::response(query.metadata.id, query.metadata.op_code);
    response.metadata.message_type = MessageType::Response;
    response.metadata.authoritative = true;
    response.metadata.recursion_desired = query.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    response.metadata.response_code = ResponseCode::NoError;
    for q in &query.queries {
        response.add_query(q.clone());
        if q.query_type() != RecordType::SRV {
            continue;
        }
        for server in servers {
            let target = Name::from_ascii(format!("{}.", server.ip())).expect("a target name");
            let srv = SRV::new(0, 0, server.port(), target);
            response.add_answer(Record::from_rdata(q.name().clone(), 0, RData::SRV(srv)));
        }
    }
    response
}
