//! What the bytes of an HTTP/1.1 connection are, one unit at a time: a request head, a body
//! counted by Content-Length, or chunked framing (size lines, data, trailers). Pure: it sees
//! bytes and says how many may go to hyper, or why the connection stops; `framing` does the
//! I/O. Invariant: it frames exactly as hyper does, refusing the heads on which two parsers
//! could disagree, so both find the next request at the same byte. It names its verdicts
//! (`Fault`) and `framing` turns them into the JSON Error, so this file stands alone and
//! `tests/fuzz` compiles it as it is.

use std::mem::MaybeUninit;

/// Header fields a request head may have, and its size in bytes. Past these the head is
/// refused with 431 and the connection closes. hyper gets the same bounds (server.rs) as a
/// backstop; `service` applies its own, lower, limits to the heads that pass.
pub const MAX_HEAD_FIELDS: usize = 256;
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// One chunk-size line, extensions included (hyper allows 16 KiB of extensions per body).
pub(super) const MAX_CHUNK_LINE_BYTES: usize = 4 * 1024;
/// A chunked body's trailer section: hyper's own bound for it.
pub(super) const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// hyper refuses a Content-Length above this (`MAX_LEN` in its `body/length.rs`).
pub(super) const MAX_CONTENT_LENGTH: u64 = u64::MAX - 2;
/// RFC 9113 3.4: a client with prior knowledge of HTTP/2 starts with this.
pub(super) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub(super) const BOTH_LENGTHS: &str = "Transfer-Encoding and Content-Length must not both be given";
pub(super) const BAD_LENGTH: &str = "Content-Length must be a decimal number of bytes";
pub(super) const NOT_CHUNKED: &str = "Transfer-Encoding must be given once, as exactly chunked";
pub(super) const ENCODING_IN_1_0: &str = "Transfer-Encoding needs HTTP/1.1";
pub(super) const BAD_VERSION: &str = "the HTTP version must be HTTP/1.0 or HTTP/1.1";
pub(super) const BAD_REQUEST_LINE: &str = "the request method or target is malformed";
pub(super) const BAD_HEAD: &str = "the request head is malformed";

/// What the next bytes of the connection are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// The connection's first bytes: HTTP/2's preface or a request head.
    Preface,
    Head,
    /// The rest of a Content-Length body.
    Length(u64),
    ChunkSize,
    /// The rest of one chunk's data.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    /// The trailer section after the last chunk, up to its empty line.
    Trailers,
    /// HTTP/2: hyper's h2 checks its own framing.
    Anything,
}

/// What the unreleased bytes, from the start of the current unit, allow.
pub(super) enum Step {
    /// This many bytes may go to hyper; the state has moved past them.
    Release(usize),
    /// The unit (head, chunk-size line, trailers) is not complete yet.
    NeedMore,
    Refuse(Refusal),
}

/// What is wrong with the bytes; `framing` answers 400 or 431 for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// 400 `invalid_request`, with this message.
    Malformed(&'static str),
    /// 400 `invalid_request`: RFC 9110 8.6, a repeated Content-Length.
    RepeatedLength,
    /// 431: past `MAX_HEAD_FIELDS` or `MAX_HEAD_BYTES`.
    TooLarge,
}

/// Why the connection stops here.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) fault: Fault,
    /// False in a body: hyper is already answering that request, and sees its body end early.
    pub(super) answered_here: bool,
}

impl Refusal {
    fn head(fault: Fault) -> Refusal {
        Refusal {
            fault,
            answered_here: true,
        }
    }

    fn body(reason: &'static str) -> Refusal {
        Refusal {
            fault: Fault::Malformed(reason),
            answered_here: false,
        }
    }
}

impl Expect {
    pub(super) fn step(&mut self, pending: &[u8]) -> Step {
        match *self {
            Expect::Preface => {
                let seen = pending.len().min(H2_PREFACE.len());
                if pending[..seen] != H2_PREFACE[..seen] {
                    *self = Expect::Head;
                    self.step(pending)
                } else if seen < H2_PREFACE.len() {
                    Step::NeedMore
                } else {
                    *self = Expect::Anything;
                    Step::Release(pending.len())
                }
            }
            Expect::Anything => Step::Release(pending.len()),
            Expect::Head => match read_head(pending) {
                Ok(Some((length, next))) => {
                    *self = next;
                    Step::Release(length)
                }
                Ok(None) => Step::NeedMore,
                Err(error) => Step::Refuse(Refusal::head(error)),
            },
            Expect::Length(left) | Expect::ChunkData(left) => {
                let taken = left.min(pending.len() as u64);
                *self = match (*self, left - taken) {
                    (Expect::Length(_), 0) => Expect::Head,
                    (Expect::ChunkData(_), 0) => Expect::ChunkEnd,
                    (Expect::Length(_), rest) => Expect::Length(rest),
                    (_, rest) => Expect::ChunkData(rest),
                };
                // At most `pending.len()`, so it fits.
                Step::Release(taken as usize)
            }
            Expect::ChunkEnd => match pending {
                [b'\r', b'\n', ..] => {
                    *self = Expect::ChunkSize;
                    Step::Release(2)
                }
                [b'\r'] => Step::NeedMore,
                _ => Step::Refuse(Refusal::body("chunk data must end with CRLF")),
            },
            Expect::ChunkSize => match read_chunk_size(pending) {
                Ok(Some((length, 0))) => {
                    *self = Expect::Trailers;
                    Step::Release(length)
                }
                Ok(Some((length, size))) => {
                    *self = Expect::ChunkData(size);
                    Step::Release(length)
                }
                Ok(None) => Step::NeedMore,
                Err(reason) => Step::Refuse(Refusal::body(reason)),
            },
            Expect::Trailers => match read_trailers(pending) {
                Ok(Some(length)) => {
                    *self = Expect::Head;
                    Step::Release(length)
                }
                Ok(None) => Step::NeedMore,
                Err(reason) => Step::Refuse(Refusal::body(reason)),
            },
        }
    }

    /// Steps through `pending` as far as it is complete: how many bytes may go to hyper, and
    /// the refusal that stopped it, if one did.
    pub(super) fn clear(&mut self, pending: &[u8]) -> (usize, Option<Refusal>) {
        let mut taken = 0;
        while taken < pending.len() {
            match self.step(&pending[taken..]) {
                Step::Release(length) => {
                    debug_assert!(length > 0, "every step consumes a byte");
                    taken += length;
                }
                Step::NeedMore => break,
                Step::Refuse(refusal) => return (taken, Some(refusal)),
            }
        }
        (taken, None)
    }

    pub(super) fn is_head(self) -> bool {
        matches!(self, Expect::Preface | Expect::Head)
    }
}

/// A complete head's length and what follows it; `None` while the head is incomplete.
/// httparse is hyper's own parser, with hyper's default settings, so the two agree on where
/// the head ends. Only the first `MAX_HEAD_BYTES` are looked at, so that the verdict never
/// depends on how the bytes were split into reads.
pub(super) fn read_head(pending: &[u8]) -> Result<Option<(usize, Expect)>, Fault> {
    let window = &pending[..pending.len().min(MAX_HEAD_BYTES)];
    let mut fields = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEAD_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    match httparse::ParserConfig::default().parse_request_with_uninit_headers(
        &mut request,
        window,
        &mut fields,
    ) {
        Ok(httparse::Status::Complete(length)) => {
            // hyper parses the target again with `http::Uri`, which takes less than httparse
            // does (a broken authority, say); refuse here what it would refuse, so that the
            // answer is our JSON and not hyper's empty 400.
            let target = request.path.unwrap_or_default();
            if http::Uri::try_from(target).is_err() {
                return Err(Fault::Malformed(BAD_REQUEST_LINE));
            }
            Ok(Some((length, body_after(&request)?)))
        }
        Ok(httparse::Status::Partial) if window.len() < MAX_HEAD_BYTES => Ok(None),
        Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
            Err(Fault::TooLarge)
        }
        Err(httparse::Error::Version) => Err(Fault::Malformed(BAD_VERSION)),
        Err(httparse::Error::Token) => Err(Fault::Malformed(BAD_REQUEST_LINE)),
        Err(_) => Err(Fault::Malformed(BAD_HEAD)),
    }
}

/// How the body after this head is framed (RFC 9112 6), refusing every head on which another
/// parser could frame it differently: hyper would take some of these (it frames by
/// Transfer-Encoding when both are given, and by the last coding), a proxy in front might not.
pub(super) fn body_after(request: &httparse::Request<'_, '_>) -> Result<Expect, Fault> {
    let (mut lengths, mut length, mut encodings, mut chunked) = (0, None, 0, false);
    for field in request.headers.iter() {
        if field.name.eq_ignore_ascii_case("content-length") {
            lengths += 1;
            length = parse_length(field.value);
        } else if field.name.eq_ignore_ascii_case("transfer-encoding") {
            encodings += 1;
            // RFC 9112 6.1: chunked must be the final coding of a request, and we take no
            // other coding (a second field counts as another coding).
            chunked = field.value.eq_ignore_ascii_case(b"chunked");
        }
    }
    if lengths > 0 && encodings > 0 {
        // RFC 9112 6.3 lets a server frame by Transfer-Encoding, but the sender is a smuggling
        // attempt or a broken intermediary either way; refusing is the safe answer it allows.
        return Err(Fault::Malformed(BOTH_LENGTHS));
    }
    if lengths > 1 {
        return Err(Fault::RepeatedLength);
    }
    if encodings > 1 || (encodings == 1 && !chunked) {
        return Err(Fault::Malformed(NOT_CHUNKED));
    }
    if encodings == 1 && request.version == Some(0) {
        return Err(Fault::Malformed(ENCODING_IN_1_0));
    }
    match (chunked, lengths, length) {
        (true, _, _) => Ok(Expect::ChunkSize),
        (false, 0, _) | (false, _, Some(0)) => Ok(Expect::Head),
        (false, _, Some(length)) => Ok(Expect::Length(length)),
        (false, _, None) => Err(Fault::Malformed(BAD_LENGTH)),
    }
}

/// Plain decimal digits, as hyper reads them (no sign, no spaces, no list).
pub(super) fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value
        .iter()
        .try_fold(0u64, |length, &byte| {
            let digit = char::from(byte).to_digit(10)?;
            length.checked_mul(10)?.checked_add(u64::from(digit))
        })
        .filter(|&length| length <= MAX_CONTENT_LENGTH)
}

/// A complete chunk-size line's length and the size it gives; `None` while incomplete.
/// The grammar is hyper's decoder's (`chunk-size [WS] [";" ext] CRLF`, hex without prefix,
/// no LF inside), so that both find the chunk data at the same place.
pub(super) fn read_chunk_size(pending: &[u8]) -> Result<Option<(usize, u64)>, &'static str> {
    #[derive(Clone, Copy, PartialEq)]
    enum Part {
        Digits,
        Space,
        Extension,
        LineFeed,
    }
    let window = &pending[..pending.len().min(MAX_CHUNK_LINE_BYTES)];
    let (mut part, mut size, mut digits) = (Part::Digits, 0u64, 0);
    for (index, &byte) in window.iter().enumerate() {
        part = match (part, byte) {
            (Part::Digits, _) if byte.is_ascii_hexdigit() => {
                let digit = char::from(byte).to_digit(16).map(u64::from);
                size = size
                    .checked_mul(16)
                    .zip(digit)
                    .and_then(|(size, digit)| size.checked_add(digit))
                    .ok_or("the chunk size is too large")?;
                digits += 1;
                Part::Digits
            }
            (Part::Digits, _) if digits == 0 => return Err("a chunk size must start with a digit"),
            (Part::Digits | Part::Space, b' ' | b'\t') => Part::Space,
            (Part::Digits | Part::Space, b';') => Part::Extension,
            (Part::Digits | Part::Space | Part::Extension, b'\r') => Part::LineFeed,
            (Part::Extension, b'\n') => return Err("a chunk extension holds a line feed"),
            (Part::Extension, _) => Part::Extension,
            (Part::LineFeed, b'\n') => return Ok(Some((index + 1, size))),
            _ => return Err("the chunk-size line is malformed"),
        };
    }
    if window.len() == MAX_CHUNK_LINE_BYTES {
        return Err("the chunk-size line is too long");
    }
    Ok(None)
}

/// The length of a complete trailer section (its fields and the empty line); `None` while
/// incomplete. hyper ends each trailer line at CRLF, as here; it parses the fields itself.
pub(super) fn read_trailers(pending: &[u8]) -> Result<Option<usize>, &'static str> {
    let window = &pending[..pending.len().min(MAX_TRAILER_BYTES)];
    let (mut start, mut fields) = (0, 0);
    while let Some(end) = window[start..]
        .iter()
        .position(|&byte| byte == b'\r' || byte == b'\n')
    {
        let end = start + end;
        match (window[end], window.get(end + 1)) {
            (b'\n', _) => return Err("a trailer line ends without CR"),
            (_, None) => break,
            (_, Some(b'\n')) if end == start => return Ok(Some(end + 2)),
            (_, Some(b'\n')) => {
                fields += 1;
                if fields > MAX_HEAD_FIELDS {
                    return Err("too many trailer fields");
                }
                start = end + 2;
            }
            (_, Some(_)) => return Err("a trailer line has CR without LF"),
        }
    }
    if window.len() == MAX_TRAILER_BYTES {
        return Err("the trailer section is too large");
    }
    Ok(None)
}
