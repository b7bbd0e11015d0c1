//! Fuzzes the HTTP/1.1 framing grammar (`src/framing/grammar.rs`), the parser that decides
//! where each request on a connection ends. The input is the connection's bytes; its first
//! eight bytes also seed how the rest is split into reads. Whatever the bytes, the grammar
//! must not panic, must release only bytes it was given, and must give the same released
//! length and the same verdict however the stream is split (as `src/framing.rs`'s property
//! test also checks, through the I/O wrapper).

#![no_main]

use libfuzzer_sys::fuzz_target;

// The grammar is pure (httparse, http and std only), so the fuzz crate compiles the very file
// the server does.
#[allow(dead_code)]
#[path = "../../../src/framing/grammar.rs"]
mod grammar;

use grammar::{Expect, Fault};

/// How a stream ended: bytes released to hyper, and the refusal, if one came.
type Outcome = (usize, Option<(Fault, bool)>);

/// Feeds `stream` to the grammar in reads of the given sizes, as `Guarded` does: released
/// bytes leave the buffer, the rest waits for the next read.
fn feed(stream: &[u8], sizes: &mut impl Iterator<Item = usize>) -> Outcome {
    let mut expect = Expect::Preface;
    let (mut pending, mut released, mut offset) = (Vec::new(), 0, 0);
    while offset < stream.len() {
        let size = sizes
            .next()
            .unwrap_or(stream.len())
            .clamp(1, stream.len() - offset);
        pending.extend_from_slice(&stream[offset..offset + size]);
        offset += size;
        let (taken, refusal) = expect.clear(&pending);
        assert!(taken <= pending.len());
        released += taken;
        pending.drain(..taken);
        if let Some(refusal) = refusal {
            return (released, Some((refusal.fault, refusal.answered_here)));
        }
    }
    (released, None)
}

fuzz_target!(|data: &[u8]| {
    let (seed, stream) = data.split_at(data.len().min(8));
    let mut state = seed.iter().fold(0x9e37_79b9_7f4a_7c15_u64, |s, &b| {
        (s ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut split = std::iter::from_fn(|| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        Some((state % 64) as usize + 1)
    });
    let whole = feed(stream, &mut std::iter::empty());
    assert!(whole.0 <= stream.len());
    assert_eq!(
        feed(stream, &mut split),
        whole,
        "split differently: {stream:?}"
    );
});
