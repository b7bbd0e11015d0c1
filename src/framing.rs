//! HTTP/1.1 request framing, checked before hyper reads a byte. `Guarded` sits between the TLS
//! stream and hyper: it holds each request head back until the head is complete, refuses the
//! shapes on which two parsers could disagree about where a request ends (request smuggling)
//! and heads past our bounds, and answers such a refusal itself with the JSON Error. Body bytes
//! pass through, counted, so that the next head is looked for where hyper will look for it.
//! Invariant: hyper only sees whole heads this module has parsed, framed as hyper frames them.
//! What the bytes mean is `framing/grammar.rs`; this file moves them and answers refusals.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::error::Error;

mod grammar;

use grammar::{Expect, Fault, Refusal};

pub use grammar::{MAX_HEAD_BYTES, MAX_HEAD_FIELDS};
/// How much the buffer for a unit that spans reads grows at a time.
const HOLD_STEP_BYTES: usize = 8 * 1024;

/// The JSON Error for what `grammar` found wrong.
fn error_for(fault: Fault) -> Error {
    match fault {
        Fault::Malformed(message) => Error::InvalidRequest(message),
        Fault::RepeatedLength => Error::REPEATED_CONTENT_LENGTH,
        Fault::TooLarge => Error::HeadersTooLarge {
            max_fields: MAX_HEAD_FIELDS,
            max_bytes: MAX_HEAD_BYTES,
        },
    }
}

/// The whole HTTP/1.1 answer to a refused head: the same JSON Error as every other answer.
fn response(error: &Error) -> Vec<u8> {
    let status = error.status();
    let body = error.json();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    if let Some((name, value)) = error.headers() {
        head.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap_or("")));
    }
    head.push_str("\r\n");
    let mut answer = head.into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// A refusal after the bytes hyper may have: what is left to say, and whether hyper has
/// reached it.
struct Refused {
    /// The answer, when the refusal is ours to answer; `written` bytes of it are sent.
    answer: Option<Vec<u8>>,
    written: usize,
    /// hyper read to the end. Until then it has answers of its own to write, and if it shuts
    /// down first (it closed after one of them), a second answer would be one too many.
    hyper_saw_end: bool,
}

/// A connection's byte stream as hyper should see it: request heads only when whole and
/// checked; bodies as they come. An HTTP/2 connection passes through untouched.
pub struct Guarded<T> {
    inner: T,
    peer: SocketAddr,
    expect: Expect,
    /// Bytes read but not yet given to hyper are `held[start..end]`; the first `cleared` of
    /// them may go. The rest begin a unit that is not complete yet. `held` is kept filled
    /// (with zeros past `end`) so that reads go into it without unsafe code.
    held: Vec<u8>,
    start: usize,
    end: usize,
    cleared: usize,
    /// A held head must be complete by `head_due` (slowloris): hyper's own head timer cannot
    /// run while a connection's first head is held, since hyper has not chosen HTTP/1 yet.
    header_timeout: Duration,
    head_due: Option<Instant>,
    timer: Option<Pin<Box<Sleep>>>,
    refused: Option<Refused>,
}

impl<T> Guarded<T> {
    /// A connection that chose HTTP/1.1 by ALPN, or nothing: heads are checked, unless it
    /// opens with HTTP/2's preface.
    pub fn http1(inner: T, peer: SocketAddr, header_timeout: Duration) -> Guarded<T> {
        Guarded {
            inner,
            peer,
            expect: Expect::Preface,
            held: Vec::new(),
            start: 0,
            end: 0,
            cleared: 0,
            header_timeout,
            head_due: None,
            timer: None,
            refused: None,
        }
    }

    /// A connection that chose HTTP/2 by ALPN: nothing to check here.
    pub fn http2(inner: T, peer: SocketAddr) -> Guarded<T> {
        Guarded {
            expect: Expect::Anything,
            ..Guarded::http1(inner, peer, Duration::ZERO)
        }
    }

    /// Checks `held[start..end]` from the start of its unit.
    fn clear_held(&mut self) {
        let (taken, refusal) = self.expect.clear(&self.held[self.start..self.end]);
        self.cleared = taken;
        if taken > 0 {
            self.head_due = None;
        }
        if let Some(refusal) = refusal {
            self.refuse(refusal);
        }
    }

    /// Keeps `bytes`, the start of a unit that is not complete, for the next read.
    fn hold(&mut self, bytes: &[u8]) {
        if self.held.len() < bytes.len() {
            self.held.resize(bytes.len().max(HOLD_STEP_BYTES), 0);
        }
        self.held[..bytes.len()].copy_from_slice(bytes);
        (self.start, self.end, self.cleared) = (0, bytes.len(), 0);
    }

    /// Makes room behind the held bytes for the next read.
    fn make_room(&mut self) {
        if self.start > 0 {
            self.held.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.end == self.held.len() {
            // Bounded: a unit is refused once it outgrows its limit, so `end` stays below
            // `MAX_HEAD_BYTES` here.
            self.held.resize(self.held.len() + HOLD_STEP_BYTES, 0);
        }
    }

    fn refuse(&mut self, refusal: Refusal) {
        let Refusal {
            fault,
            answered_here,
        } = refusal;
        let error = error_for(fault);
        let status = error.status().as_u16();
        if answered_here {
            tracing::debug!(peer = %self.peer, status, reason = %error.message(), "request head refused");
        } else {
            tracing::debug!(peer = %self.peer, reason = %error.message(), "request body framing refused");
        }
        // What follows the refused unit is never read, let alone given to hyper.
        self.end = self.start + self.cleared;
        self.refused = Some(Refused {
            answer: answered_here.then(|| response(&error)),
            written: 0,
            hyper_saw_end: false,
        });
    }

    /// Waits on the held head's deadline; ready (an error) once it has passed.
    fn poll_head_due(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        if !self.expect.is_head() {
            return Poll::Pending;
        }
        let timeout = self.header_timeout;
        let due = *self
            .head_due
            .get_or_insert_with(|| Instant::now() + timeout);
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        if timer.deadline() != due {
            timer.as_mut().reset(due);
        }
        ready!(timer.as_mut().poll(cx));
        tracing::debug!(peer = %self.peer, "request head timed out");
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "the request head did not arrive in time",
        ))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if this.cleared > 0 {
                let length = this.cleared.min(out.remaining());
                out.put_slice(&this.held[this.start..this.start + length]);
                this.start += length;
                this.cleared -= length;
                if this.start == this.end {
                    (this.start, this.end) = (0, 0);
                    if this.held.len() > HOLD_STEP_BYTES {
                        this.held = Vec::new();
                    }
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(refused) = &mut this.refused {
                // hyper has everything before the refusal; to it, the connection ends here.
                refused.hyper_saw_end = true;
                return Poll::Ready(Ok(()));
            }

            if this.start == this.end {
                // Nothing held: read straight into hyper's buffer, so that bodies are not
                // copied, and keep back only what may not go yet.
                let before = out.filled().len();
                ready!(Pin::new(&mut this.inner).poll_read(cx, out))?;
                let read = &out.filled()[before..];
                if read.is_empty() || this.expect == Expect::Anything {
                    return Poll::Ready(Ok(()));
                }
                let (taken, refusal) = this.expect.clear(read);
                if let Some(refusal) = refusal {
                    this.refuse(refusal);
                } else if taken < read.len() {
                    this.hold(&read[taken..]);
                }
                out.set_filled(before + taken);
                if taken > 0 {
                    this.head_due = None;
                    return Poll::Ready(Ok(()));
                }
                continue;
            }

            // An incomplete unit is held: read more behind it.
            this.make_room();
            let mut room = ReadBuf::new(&mut this.held[this.end..]);
            match Pin::new(&mut this.inner).poll_read(cx, &mut room) {
                Poll::Pending => {
                    let expired = ready!(this.poll_head_due(cx));
                    return Poll::Ready(Err(expired));
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let read = room.filled().len();
            if read == 0 {
                // The client stopped sending mid-unit: nothing here can be answered.
                (this.start, this.end) = (0, 0);
                return Poll::Ready(Ok(()));
            }
            this.end += read;
            this.clear_held();
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
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

    /// hyper shuts down once it has answered every request it was given and read the end:
    /// the refusal's answer goes last, after all of them, as pipelining requires.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(Refused {
            answer: Some(answer),
            written,
            hyper_saw_end: true,
        }) = &mut this.refused
        {
            while *written < answer.len() {
                let sent = ready!(Pin::new(&mut this.inner).poll_write(cx, &answer[*written..]))?;
                if sent == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                *written += sent;
            }
            ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::task::Waker;

    use proptest::prelude::*;

    use super::grammar::*;
    use super::*;

    /// A client's side of the stream: each read yields the next of `chunks` (or as much of it
    /// as fits), then the end; never pending. Writes are recorded.
    struct Client {
        chunks: VecDeque<Vec<u8>>,
        written: Vec<u8>,
    }

    impl AsyncRead for Client {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(mut chunk) = self.chunks.pop_front() {
                let length = chunk.len().min(buf.remaining());
                buf.put_slice(&chunk[..length]);
                if length < chunk.len() {
                    chunk.drain(..length);
                    self.chunks.push_front(chunk);
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Client {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.written.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// What hyper would see of a connection, and what the guard answered at its end.
    #[derive(Debug, PartialEq)]
    struct Seen {
        released: Vec<u8>,
        refused: bool,
        answer: String,
    }

    /// Plays `chunks` through a guard as hyper would: reads of `read_sizes` (in turn) until
    /// the end, then a shutdown.
    fn play(chunks: Vec<Vec<u8>>, read_sizes: &[usize]) -> Seen {
        let client = Client {
            chunks: chunks.into(),
            written: Vec::new(),
        };
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let mut guarded = Guarded::http1(client, peer, Duration::from_secs(10));
        let mut cx = Context::from_waker(Waker::noop());
        let mut released = Vec::new();
        for size in read_sizes.iter().cycle() {
            let mut space = vec![0; *size];
            let mut buf = ReadBuf::new(&mut space);
            match Pin::new(&mut guarded).poll_read(&mut cx, &mut buf) {
                Poll::Ready(Ok(())) if buf.filled().is_empty() => break,
                Poll::Ready(Ok(())) => released.extend_from_slice(buf.filled()),
                other => panic!("the client is never pending: {other:?}"),
            }
        }
        let shut = Pin::new(&mut guarded).poll_shutdown(&mut cx);
        assert!(matches!(shut, Poll::Ready(Ok(()))), "{shut:?}");
        Seen {
            released,
            refused: guarded.refused.is_some(),
            answer: String::from_utf8_lossy(&guarded.inner.written).into_owned(),
        }
    }

    fn whole(bytes: &[u8]) -> Seen {
        play(vec![bytes.to_vec()], &[64 * 1024])
    }

    /// The JSON body of a guard's answer.
    fn answer_body(seen: &Seen) -> serde_json::Value {
        let (head, body) = seen.answer.split_once("\r\n\r\n").expect("an answer");
        assert!(head.contains("\r\nconnection: close"), "{head}");
        assert!(
            head.contains("\r\ncontent-type: application/json"),
            "{head}"
        );
        serde_json::from_str(body).expect("a JSON body")
    }

    fn refused_with(bytes: &[u8], status: u16, message: &str) {
        let seen = whole(bytes);
        assert!(seen.refused, "{seen:?}");
        let body = answer_body(&seen);
        assert_eq!(
            (body["status"].as_u64(), body["message"].as_str()),
            (Some(status.into()), Some(message)),
            "{seen:?}"
        );
        assert!(
            seen.answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{seen:?}"
        );
    }

    const GET: &[u8] = b"GET /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n";

    #[test]
    fn a_head_is_held_until_complete_then_released_whole() {
        let mut expect = Expect::Preface;
        let (taken, refusal) = expect.clear(&GET[..20]);
        assert!(taken == 0 && refusal.is_none());
        let (taken, refusal) = expect.clear(GET);
        assert!(taken == GET.len() && refusal.is_none());
        assert_eq!(expect, Expect::Head);
        let seen = play(GET.chunks(3).map(<[u8]>::to_vec).collect(), &[5, 4096]);
        assert_eq!((seen.released.as_slice(), seen.refused), (GET, false));
    }

    #[test]
    fn smuggling_shapes_are_refused_with_400() {
        let cases: [(&[u8], &str); 8] = [
            (b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", BOTH_LENGTHS),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", BOTH_LENGTHS),
            (b"POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n", "Content-Length must be given at most once"),
            (b"POST / HTTP/1.1\r\nContent-Length: 4\r\ncontent-length: 4\r\n\r\n", "Content-Length must be given at most once"),
            (b"POST / HTTP/1.1\r\nContent-Length: 4 4\r\n\r\n", BAD_LENGTH),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", NOT_CHUNKED),
            (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", NOT_CHUNKED),
            (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", ENCODING_IN_1_0),
        ];
        for (head, message) in cases {
            refused_with(head, 400, message);
        }
    }

    #[test]
    fn malformed_heads_are_refused_with_400_and_large_ones_with_431() {
        refused_with(b"GET / HTTP/2.0\r\n\r\n", 400, BAD_VERSION);
        refused_with(b"G@T / HTTP/1.1\r\n\r\n", 400, BAD_REQUEST_LINE);
        refused_with(b"GET http://[::1/ HTTP/1.1\r\n\r\n", 400, BAD_REQUEST_LINE);
        refused_with(b"GET / HTTP/1.1\r\nNo Colon\r\n\r\n", 400, BAD_HEAD);
        let too_large = "request headers must be at most 256 fields and 65536 bytes";
        let many: String = (0..=MAX_HEAD_FIELDS)
            .map(|i| format!("f{i}: v\r\n"))
            .collect();
        refused_with(
            format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes(),
            431,
            too_large,
        );
        refused_with(&vec![b'\n'; MAX_HEAD_BYTES], 431, too_large);
    }

    #[test]
    fn a_head_of_exactly_the_bound_passes_and_one_byte_more_does_not() {
        let head = |length: usize| {
            let bare = "GET / HTTP/1.1\r\nx: \r\n\r\n".len();
            format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(length - bare)).into_bytes()
        };
        let fits = head(MAX_HEAD_BYTES);
        assert_eq!(whole(&fits).released, fits);
        assert!(whole(&head(MAX_HEAD_BYTES + 1)).refused);
    }

    #[test]
    fn bodies_pass_as_framed_and_the_next_head_is_found_after_them() {
        // Each body holds what would be a head if it were parsed as one.
        let pipeline = [
            &b"POST / HTTP/1.1\r\nContent-Length: 14\r\n\r\nGET / HTTP/1.1"[..],
            b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n",
            b"4;a=b;c\r\nGET \r\nA \t;x\r\n/ HTTP/1.1\r\n0\r\nx-sum: 1\r\ny: 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            GET,
        ]
        .concat();
        let seen = play(pipeline.chunks(7).map(<[u8]>::to_vec).collect(), &[3, 100]);
        assert_eq!((seen.released, seen.refused), (pipeline, false));
    }

    #[test]
    fn a_refusal_after_a_good_request_releases_the_good_one_and_answers_last() {
        let bad = b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx";
        let seen = whole(&[GET, bad, GET].concat());
        assert_eq!(seen.released, GET);
        assert_eq!(answer_body(&seen)["code"], "invalid_request");
    }

    #[test]
    fn a_malformed_chunk_ends_the_stream_without_an_answer_of_its_own() {
        for body in [
            &b"zz\r\n"[..],
            b"5\r\nhello0\r\n",
            b"5 5\r\n",
            b"5;\n\r\n",
            b"0\r\nbad\nfield\r\n\r\n",
        ] {
            let head = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
            let seen = whole(&[&head[..], body, GET].concat());
            assert!(seen.refused, "{body:?}");
            assert!(
                seen.released.starts_with(head) && !seen.released.ends_with(GET),
                "{body:?}"
            );
            // The request is hyper's to answer: it sees its body end early.
            assert_eq!(seen.answer, "", "{body:?}");
        }
    }

    #[test]
    fn http2_s_preface_passes_through_untouched() {
        let h2 = [
            H2_PREFACE,
            &[0, 0, 0, 4, 0, 0, 0, 0, 0],
            b"\xff\x00 anything",
        ]
        .concat();
        let seen = play(h2.chunks(5).map(<[u8]>::to_vec).collect(), &[24, 7]);
        assert_eq!((seen.released, seen.refused), (h2, false));
        // Only as the connection's first bytes.
        assert!(whole(&[GET, H2_PREFACE].concat()).refused);
    }

    #[test]
    fn nothing_is_answered_unless_hyper_read_to_the_refusal() {
        let bad = b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n";
        let client = Client {
            chunks: vec![[GET, bad].concat()].into(),
            written: Vec::new(),
        };
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let mut guarded = Guarded::http1(client, peer, Duration::from_secs(10));
        let mut cx = Context::from_waker(Waker::noop());
        let mut space = [0; 1024];
        let mut buf = ReadBuf::new(&mut space);
        // This read finds the refusal behind the good request and gives hyper the request.
        assert!(
            Pin::new(&mut guarded)
                .poll_read(&mut cx, &mut buf)
                .is_ready()
        );
        assert_eq!(buf.filled(), GET);
        assert!(guarded.refused.is_some());
        // hyper shuts down without reading on (its answer said `Connection: close`).
        assert!(Pin::new(&mut guarded).poll_shutdown(&mut cx).is_ready());
        assert!(
            guarded.inner.written.is_empty(),
            "one answer per request at most"
        );
    }

    #[test]
    fn content_length_is_plain_digits_within_hyper_s_bound() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"0012"), Some(12));
        assert_eq!(
            parse_length(b"18446744073709551613"),
            Some(MAX_CONTENT_LENGTH)
        );
        for bad in [
            &b""[..],
            b"18446744073709551614",
            b"99999999999999999999",
            b"+1",
            b"1 ",
            b"1,1",
            b"0x1",
        ] {
            assert_eq!(parse_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn chunk_size_lines_follow_hyper_s_grammar() {
        assert_eq!(read_chunk_size(b"1f\r\n"), Ok(Some((4, 31))));
        assert_eq!(read_chunk_size(b"A ; x=\"y\"\r\nrest"), Ok(Some((11, 10))));
        assert_eq!(
            read_chunk_size(b"ffffffffffffffff\r\n"),
            Ok(Some((18, u64::MAX)))
        );
        assert_eq!(read_chunk_size(b"1f"), Ok(None));
        assert_eq!(read_chunk_size(b"1f\r"), Ok(None));
        for bad in [
            &b"\r\n"[..],
            b";x\r\n",
            b"0x1\r\n",
            b"1 1\r\n",
            b"1\r\r\n",
            b"1\n",
            b"1;a\nb\r\n",
            b"10000000000000000\r\n",
        ] {
            assert!(read_chunk_size(bad).is_err(), "{bad:?}");
        }
        assert!(read_chunk_size(&[b'0'; MAX_CHUNK_LINE_BYTES]).is_err());
    }

    /// Pieces of HTTP/1.1 requests, good and bad, for the generator to string together.
    const PIECES: &[&[u8]] = &[
        b"GET / HTTP/1.1\r\n",
        b"POST /v1/pets HTTP/1.1\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"Host: x\r\n",
        b"Content-Length: 5\r\n",
        b"Content-Length: 0\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"\r\n",
        b"hello",
        b"5\r\nhello\r\n",
        b"3;ext=1\r\nabc\r\n",
        b"0\r\n\r\n",
        b"0\r\nx: y\r\n\r\n",
        b"\n",
        b"\r",
        b" ",
    ];

    fn requests() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..512),
            proptest::collection::vec(proptest::sample::select(PIECES), 0..40)
                .prop_map(|p| p.concat()),
        ]
    }

    proptest! {
        #[test]
        fn any_bytes_split_any_way_give_the_same_release_and_verdict(
            input in requests(),
            cuts in proptest::collection::vec(1usize..40, 1..30),
            read_sizes in proptest::collection::vec(1usize..100, 1..8),
        ) {
            let mut chunks = Vec::new();
            let mut rest = input.as_slice();
            for cut in cuts.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (chunk, after) = rest.split_at((*cut).min(rest.len()));
                chunks.push(chunk.to_vec());
                rest = after;
            }
            let at_once = whole(&input);
            prop_assert!(input.starts_with(&at_once.released));
            prop_assert_eq!(play(chunks, &read_sizes), at_once);
        }
    }
}
