//! gRPC on a Unix socket for every client: gRPC's C core (grpcio, and the clients built on it)
//! sends the socket's path as `:authority` for a `unix:` target
//! (`tmp%2Frls.sock`), which is not an authority; h2 answers such a request with RST_STREAM
//! PROTOCOL_ERROR, where the reference's grpc-go takes any authority. So on `GRPC_UDS` the
//! client's HTTP/2 frames pass through [`AuthorityFix`] before h2 reads them: every header
//! block is decoded (HPACK, the client's dynamic table kept in step), an `:authority` that is
//! not one becomes `localhost`, and the block is sent on re-encoded without indexing (h2's
//! table stays empty); every other frame, and everything the server writes, passes as it is.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use loona_hpack::encoder::encode_integer_into;
use loona_hpack::Decoder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// What every HTTP/2 client sends first.
const PREFACE_LEN: usize = 24;

/// A frame's header: length (3 bytes), type, flags, stream id (4 bytes).
const FRAME_HEADER_LEN: usize = 9;

/// HTTP/2's frame types and flags that matter here.
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The largest frame payload sent on to h2 (its `SETTINGS_MAX_FRAME_SIZE`, the protocol's
/// default).
const MAX_FRAME_PAYLOAD: usize = 16_384;

/// The largest header block taken (h2 itself takes at most 16 KiB of headers by default).
const MAX_HEADER_BLOCK: usize = 1024 * 1024;

/// `S`, with its client's header blocks given an authority h2 takes.
pub(crate) struct AuthorityFix<S> {
    inner: S,
    /// Bytes read from `inner` and not yet looked at.
    input: Vec<u8>,
    /// Bytes ready for h2, from `at` on.
    output: Vec<u8>,
    at: usize,
    /// Bytes of the connection preface still to pass.
    preface_left: usize,
    decoder: Decoder<'static>,
    /// A header block whose CONTINUATION frames are still coming.
    block: Option<Block>,
    /// `inner` has ended.
    ended: bool,
}

/// A header block being gathered.
struct Block {
    stream: [u8; 4],
    end_stream: bool,
    priority: Option<[u8; 5]>,
    bytes: Vec<u8>,
}

impl<S> AuthorityFix<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            input: Vec::new(),
            output: Vec::new(),
            at: 0,
            preface_left: PREFACE_LEN,
            decoder: Decoder::new(),
            block: None,
            ended: false,
        }
    }

    /// Moves every complete frame of `input` to `output`, header blocks rewritten.
    fn process(&mut self) -> io::Result<()> {
        let mut used = 0;
        if self.preface_left > 0 {
            let n = self.preface_left.min(self.input.len());
            self.output.extend_from_slice(&self.input[..n]);
            self.preface_left -= n;
            used = n;
        }
        while self.preface_left == 0 {
            let rest = &self.input[used..];
            if rest.len() < FRAME_HEADER_LEN {
                break;
            }
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            if rest.len() < FRAME_HEADER_LEN + len {
                break;
            }
            let (kind, flags) = (rest[3], rest[4]);
            let stream = [rest[5], rest[6], rest[7], rest[8]];
            let frame_end = used + FRAME_HEADER_LEN + len;
            match kind {
                HEADERS | CONTINUATION => {
                    let payload = self.input[used + FRAME_HEADER_LEN..frame_end].to_vec();
                    self.header_frame(kind, flags, stream, &payload)?;
                }
                _ => self.output.extend_from_slice(&self.input[used..frame_end]),
            }
            used = frame_end;
        }
        self.input.drain(..used);
        Ok(())
    }

    /// Gathers a HEADERS or CONTINUATION frame's fragment; a whole block is rewritten.
    fn header_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: [u8; 4],
        payload: &[u8],
    ) -> io::Result<()> {
        let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        let fragment = match kind {
            HEADERS => {
                if self.block.is_some() {
                    return Err(invalid("HEADERS while a header block is open"));
                }
                let mut body = payload;
                if flags & PADDED != 0 {
                    let pad = usize::from(*body.first().ok_or_else(|| invalid("no pad length"))?);
                    body = body
                        .get(1..body.len().saturating_sub(pad))
                        .filter(|_| pad < payload.len())
                        .ok_or_else(|| invalid("padding longer than the frame"))?;
                }
                let mut priority = None;
                if flags & PRIORITY != 0 {
                    let head = body.get(..5).ok_or_else(|| invalid("short priority"))?;
                    priority = Some([head[0], head[1], head[2], head[3], head[4]]);
                    body = &body[5..];
                }
                self.block = Some(Block {
                    stream,
                    end_stream: flags & END_STREAM != 0,
                    priority,
                    bytes: Vec::new(),
                });
                body
            }
            _ => payload,
        };
        let block = self
            .block
            .as_mut()
            .filter(|b| b.stream == stream)
            .ok_or_else(|| invalid("CONTINUATION without its HEADERS"))?;
        if block.bytes.len() + fragment.len() > MAX_HEADER_BLOCK {
            return Err(invalid("header block too large"));
        }
        block.bytes.extend_from_slice(fragment);
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        let Some(block) = self.block.take() else {
            return Ok(());
        };
        let headers = (self.decoder.decode(&block.bytes))
            .map_err(|e| invalid(&format!("header block: {e}")))?;
        let mut encoded = Vec::with_capacity(block.bytes.len() + 64);
        for (name, value) in &headers {
            let value = match name.as_slice() == b":authority" && !is_authority(value) {
                true => b"localhost".as_slice(),
                false => value.as_slice(),
            };
            literal(&mut encoded, name, value)?;
        }
        self.emit(&block, &encoded);
        Ok(())
    }

    /// Writes `encoded` as a HEADERS frame, and CONTINUATION frames past the frame size.
    fn emit(&mut self, block: &Block, encoded: &[u8]) {
        let mut first = Vec::with_capacity(encoded.len() + 5);
        if let Some(priority) = block.priority {
            first.extend_from_slice(&priority);
        }
        let room = MAX_FRAME_PAYLOAD - first.len();
        let (head, mut rest) = encoded.split_at(encoded.len().min(room));
        first.extend_from_slice(head);
        let mut flags = 0;
        if block.end_stream {
            flags |= END_STREAM;
        }
        if block.priority.is_some() {
            flags |= PRIORITY;
        }
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        self.frame(HEADERS, flags, block.stream, &first);
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(rest.len().min(MAX_FRAME_PAYLOAD));
            let flags = if after.is_empty() { END_HEADERS } else { 0 };
            self.frame(CONTINUATION, flags, block.stream, chunk);
            rest = after;
        }
    }

    fn frame(&mut self, kind: u8, flags: u8, stream: [u8; 4], payload: &[u8]) {
        let len = payload.len();
        self.output.extend_from_slice(&[
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
        ]);
        self.output.extend_from_slice(&stream);
        self.output.extend_from_slice(payload);
    }
}

/// Whether h2 takes `value` as an authority.
fn is_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// A "literal header field without indexing, new name" (RFC 7541, 6.2.2), without Huffman
/// coding.
fn literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> io::Result<()> {
    out.push(0);
    encode_integer_into(name.len(), 7, 0, out)?;
    out.extend_from_slice(name);
    encode_integer_into(value.len(), 7, 0, out)?;
    out.extend_from_slice(value);
    Ok(())
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.at < this.output.len() {
                let n = buf.remaining().min(this.output.len() - this.at);
                buf.put_slice(&this.output[this.at..this.at + n]);
                this.at += n;
                if this.at == this.output.len() {
                    this.output.clear();
                    this.at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                // A frame left half: h2 sees the connection end, as it would have.
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.ended = true;
                continue;
            }
            this.input.extend_from_slice(read.filled());
            this.process()?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: Connected> Connected for AuthorityFix<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use loona_hpack::Encoder;
    use tokio::io::AsyncReadExt;

    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// Two requests, the second referring to the first's indexed headers, split over a
    /// CONTINUATION: both come out with `localhost`, the rest of their headers and every other
    /// frame unchanged.
    #[tokio::test]
    async fn a_socket_path_authority_becomes_localhost() {
        let mut client = Encoder::new();
        let headers: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":authority", b"tmp%2Frls.sock"),
            (
                b":path",
                b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            ),
            (b"te", b"trailers"),
        ];
        let first = client.encode(headers.iter().copied());
        let second = client.encode(headers.iter().copied());
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        wire.extend(frame(0x4, 0, 0, &[]));
        wire.extend(frame(HEADERS, END_HEADERS, 1, &first));
        wire.extend(frame(0x0, END_STREAM, 1, b"data"));
        let (a, b) = second.split_at(3);
        wire.extend(frame(
            HEADERS,
            PRIORITY,
            3,
            &[[0, 0, 0, 0, 15].as_slice(), a].concat(),
        ));
        wire.extend(frame(CONTINUATION, END_HEADERS, 3, b));
        let mut fixed = AuthorityFix::new(wire.as_slice());
        let mut out = Vec::new();
        fixed.read_to_end(&mut out).await.unwrap();

        assert_eq!(&out[..24], &wire[..24]);
        let mut h2 = Decoder::new();
        let mut at = 24;
        let mut blocks = Vec::new();
        while at < out.len() {
            let len = usize::from(out[at]) << 16
                | usize::from(out[at + 1]) << 8
                | usize::from(out[at + 2]);
            let (kind, flags) = (out[at + 3], out[at + 4]);
            let payload = &out[at + 9..at + 9 + len];
            if kind == HEADERS {
                let block = if flags & PRIORITY != 0 {
                    &payload[5..]
                } else {
                    payload
                };
                assert_ne!(flags & END_HEADERS, 0);
                blocks.push(h2.decode(block).unwrap());
            } else if kind == 0x0 {
                assert_eq!(payload, b"data");
            }
            at += 9 + len;
        }
        assert_eq!(blocks.len(), 2);
        for block in blocks {
            let authority = block.iter().find(|(n, _)| n == b":authority").unwrap();
            assert_eq!(authority.1, b"localhost");
            assert_eq!(block.len(), 4);
        }
    }

    #[test]
    fn a_good_authority_is_kept() {
        assert!(is_authority(b"localhost:8081"));
        assert!(is_authority(b"rls.default.svc"));
        assert!(!is_authority(b"tmp%2Frls.sock"));
        assert!(!is_authority(b"/tmp/rls.sock"));
    }
}
