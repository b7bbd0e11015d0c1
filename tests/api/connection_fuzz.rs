//! The whole connection path under mutated bytes, as the fuzz target of the HTTP/1.1 framing
//! layer did for the parser hyper replaced: valid streams (pipelined HTTP/1.1 requests, sized
//! and chunked bodies, an HTTP/2 preface with frames) are bit-flipped, cut, spliced, repeated
//! and salted with framing tokens, then sent over real TLS to the real server. Whatever the
//! bytes: every connection ends within the deadlines (no hang), no request is answered with a
//! 5xx, nothing panics, and the server keeps serving. The cases come from a seeded generator:
//! `PETSTORE_FUZZ_CASES` (default 256) and `PETSTORE_FUZZ_SEED` run more or other cases, and
//! a failure names the seed and case that broke.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::Semaphore;

use crate::support::{DEV_KEY, Options, Rng, Server, read_until_closed, tls_config, tls_connect};

/// Connections in flight at once: most cases wait out a 1 s header or idle timeout.
const PARALLEL: usize = 16;
/// A connection still open this long after its bytes were sent hangs: with every timeout at
/// 1 s, nothing a client sends may keep it longer.
const HANG: Duration = Duration::from_secs(10);

fn seeds() -> Vec<Vec<u8>> {
    let auth = format!("Authorization: Bearer {DEV_KEY}\r\n");
    let get = format!("GET /v1/pets?limit=2 HTTP/1.1\r\nHost: x\r\n{auth}\r\n");
    let pet = r#"{"name":"fuzz","categoryId":1,"status":"sold"}"#;
    let sized = format!(
        "POST /v1/pets HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{pet}",
        pet.len()
    );
    let chunked = format!(
        "POST /v1/pets HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n5;x=y\r\n{}\r\n{:x}\r\n{}\r\n0\r\nx-t: 1\r\n\r\n",
        &pet[..5],
        pet.len() - 5,
        &pet[5..]
    );
    let patch = format!(
        "PATCH /v1/pets/1 HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/merge-patch+json\r\n\
         If-Match: \"1.1\"\r\nContent-Length: 17\r\n\r\n{{\"status\":\"sold\"}}"
    );
    let mut h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS (empty), then HEADERS on stream 1 from HPACK's static table (GET https /
    // :authority localhost), END_STREAM | END_HEADERS, then a PING.
    h2.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let block = [
        0x82, 0x87, 0x84, 0x01, 9, b'l', b'o', b'c', b'a', b'l', b'h', b'o', b's', b't',
    ];
    h2.extend_from_slice(&[0, 0, block.len() as u8, 1, 5, 0, 0, 0, 1]);
    h2.extend_from_slice(&block);
    h2.extend_from_slice(&[0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    vec![
        format!("{get}{get}").into_bytes(),
        format!("{sized}{get}").into_bytes(),
        format!("{chunked}{get}").into_bytes(),
        format!("{patch}{get}").into_bytes(),
        h2,
    ]
}

/// Bytes that matter to HTTP framing, dropped in at random places.
const TOKENS: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n",
    b":",
    b" ",
    b"\0",
    b"Content-Length: 5\r\n",
    b"Content-Length: 99999999999999999999\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip, chunked\r\n",
    b"0\r\n\r\n",
    b"ffffffffffffffff\r\n",
    b"HTTP/1.1",
    b"Host: y\r\n",
    b"Expect: 100-continue\r\n",
    b"Connection: close\r\n",
    b"Upgrade: h2c\r\n",
];

/// One case: a seed and a few mutations of it.
fn mutate(seeds: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = seeds[rng.below(seeds.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(7) {
            0 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            1 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                bytes.splice(at..at, token.iter().copied());
            }
            2 => {
                let end = (at + rng.below(64)).min(bytes.len());
                bytes.drain(at..end);
            }
            3 => {
                let end = (at + rng.below(128)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                bytes.splice(at..at, copy);
            }
            4 => bytes.truncate(at),
            5 => {
                let other = &seeds[rng.below(seeds.len())];
                let from = rng.below(other.len());
                bytes.splice(at..at, other[from..].iter().copied());
            }
            _ => {
                // A long run: past the head bounds, or a huge chunk.
                let run = [b'a', b'9', b' ', b'\t'][rng.below(4)];
                let length = [100, 5_000, 70_000][rng.below(3)];
                bytes.splice(at..at, std::iter::repeat_n(run, length));
            }
        }
    }
    bytes
}

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread")]
async fn mutated_streams_never_hang_crash_or_get_a_5xx() {
    let server = Server::start_with(Options {
        args: [
            "--header-timeout",
            "1",
            "--idle-timeout",
            "1",
            "--body-timeout",
            "1",
            "--log-format",
            "json",
        ]
        .map(String::from)
        .to_vec(),
        ..Options::default()
    });
    let cases = setting("PETSTORE_FUZZ_CASES", 256);
    let seed = setting("PETSTORE_FUZZ_SEED", 0x5eed);
    let seeds = seeds();
    let mut rng = Rng(seed | 1);
    let slots = Arc::new(Semaphore::new(PARALLEL));
    let mut tasks = Vec::new();
    for case in 0..cases {
        let bytes = mutate(&seeds, &mut rng);
        let h2 = bytes.starts_with(b"PRI * HTTP/2.0");
        let slot = Arc::clone(&slots).acquire_owned().await.expect("a slot");
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
            let config = tls_config(alpn, rustls::DEFAULT_VERSIONS);
            let mut tls = tls_connect(addr, config).await.expect("TLS");
            // The server may close before it has read everything: that is an answer too.
            let _ = tls.write_all(&bytes).await;
            let _ = tls.flush().await;
            let reading = tokio::time::timeout(HANG, read_until_closed(&mut tls)).await;
            drop(slot);
            let Ok(answer) = reading else {
                panic!(
                    "seed {seed} case {case}: still open after {HANG:?}: {:?}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(3000)])
                );
            };
            if !h2 {
                for status in answer
                    .split("HTTP/1.1 ")
                    .skip(1)
                    .filter_map(|rest| rest.get(..3)?.parse::<u16>().ok())
                {
                    assert!(
                        status < 500,
                        "seed {seed} case {case}: {status} for {:?}",
                        String::from_utf8_lossy(&bytes)
                    );
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a case neither hung nor failed");
    }
    let mut client = server.h1().await;
    assert_eq!(client.get("/v1/pets").await.status, 200, "still serving");
    let logs = server.stop().logs;
    for line in logs.lines() {
        let line: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        assert!(
            line["status"].as_u64().is_none_or(|status| status < 500),
            "seed {seed}: {line}"
        );
        assert_ne!(line["level"], "ERROR", "seed {seed}: {line}");
    }
    assert!(!logs.contains("panicked"), "seed {seed}: {logs}");
}
