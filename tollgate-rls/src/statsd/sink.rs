//! Where the statsd lines go: over TCP by default, as the reference's gostats sink sends them
//! (lyft/gostats `net_sink.go`, `STATSD_PROTOCOL` unset), or over UDP (`STATSD_PROTOCOL=udp`,
//! and DogStatsD always, as its datadog-go client does). Both are cadence sinks, written to by
//! one thread once per flush and never by a request.

use std::io::{self, BufWriter, Write as _};
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use cadence::{BufferedUdpMetricSink, MetricSink, StatsdClient};

use super::options::{Protocol, Statsd};

/// The bytes gathered before a datagram leaves: one that fits an Ethernet frame unfragmented.
const DATAGRAM_BYTES: usize = 1432;

/// The bytes gathered before a TCP write.
const STREAM_BYTES: usize = 64 * 1024;

/// How long a TCP connect or write may take before the lines of this flush are given up.
const NETWORK_TIMEOUT: Duration = Duration::from_secs(1);

/// How often a UDP sink looks `STATSD_HOST` up again, so that a moved statsd is followed.
const RESOLVE_EVERY: Duration = Duration::from_secs(30);

/// A statsd client for `settings`, or why there is none yet (for UDP, `STATSD_HOST` does not
/// resolve).
pub(crate) fn client(settings: &Statsd) -> io::Result<StatsdClient> {
    let target = (settings.host.clone(), settings.port);
    match settings.protocol {
        Protocol::Tcp => Ok(StatsdClient::from_sink("", TcpSink::new(target))),
        Protocol::Udp => {
            let socket = match target.to_socket_addrs()?.next() {
                Some(a) if a.is_ipv6() => UdpSocket::bind("[::]:0")?,
                _ => UdpSocket::bind("0.0.0.0:0")?,
            };
            let sink = BufferedUdpMetricSink::builder()
                .with_capacity(DATAGRAM_BYTES)
                .with_resolver_period(RESOLVE_EVERY)
                .build(target, socket)
                .map_err(io::Error::other)?;
            Ok(StatsdClient::from_sink("", sink))
        }
    }
}

/// Lines written to one TCP connection, opened when needed and dropped on an error. A flush
/// that cannot connect gives up its remaining lines at once rather than trying again for each.
struct TcpSink {
    target: (String, u16),
    state: Mutex<TcpState>,
}

#[derive(Default)]
struct TcpState {
    stream: Option<BufWriter<TcpStream>>,
    /// A connect failed during this flush.
    gave_up: bool,
}

impl TcpSink {
    fn new(target: (String, u16)) -> Self {
        Self {
            target,
            state: Mutex::default(),
        }
    }

    fn connect(&self) -> io::Result<BufWriter<TcpStream>> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "STATSD_HOST has no address");
        for address in self.target.to_socket_addrs()? {
            match TcpStream::connect_timeout(&address, NETWORK_TIMEOUT) {
                Ok(stream) => {
                    stream.set_write_timeout(Some(NETWORK_TIMEOUT))?;
                    return Ok(BufWriter::with_capacity(STREAM_BYTES, stream));
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

impl MetricSink for TcpSink {
    fn emit(&self, line: &str) -> io::Result<usize> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.gave_up {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "statsd is not reachable",
            ));
        }
        let stream = match &mut state.stream {
            Some(stream) => stream,
            empty => match self.connect() {
                Ok(stream) => empty.insert(stream),
                Err(e) => {
                    state.gave_up = true;
                    return Err(e);
                }
            },
        };
        let written = (stream.write_all(line.as_bytes())).and_then(|()| stream.write_all(b"\n"));
        if let Err(e) = written {
            state.stream = None;
            return Err(e);
        }
        Ok(line.len() + 1)
    }

    fn flush(&self) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.gave_up = false;
        let Some(stream) = &mut state.stream else {
            return Ok(());
        };
        let flushed = stream.flush();
        if flushed.is_err() {
            state.stream = None;
        }
        flushed
    }
}
