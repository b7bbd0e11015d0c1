//! Where log lines go: appended to a shared buffer in memory, and written to stderr by a
//! thread of their own every `FLUSH_INTERVAL` or sooner once `FLUSH_BYTES` wait. A request
//! pays a copy, never a `write` or a thread wake-up (one a line cost a quarter of the
//! throughput of a one-core server, see benches/load). Invariant: the buffer never grows past
//! `MAX_PENDING_BYTES`: lines beyond it are dropped and counted, so a stalled stderr can slow
//! the log, never the server.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait before it is written.
const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Waiting bytes that wake the writer before the interval is up.
const FLUSH_BYTES: usize = 64 * 1024;
/// Waiting bytes past which new lines are dropped.
const MAX_PENDING_BYTES: usize = 4 * 1024 * 1024;

/// The sink tracing writes to; cheap to share.
#[derive(Clone)]
pub struct Sink {
    shared: Arc<Shared>,
}

/// Stops the writer thread when dropped, after it has written every waiting line.
pub struct Flusher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    pending: Mutex<Vec<u8>>,
    wake: Condvar,
    closing: AtomicBool,
    dropped: AtomicU64,
}

/// Starts the writer thread for `out` (stderr in the server).
pub fn start(out: impl Write + Send + 'static) -> io::Result<(Sink, Flusher)> {
    let shared = Arc::new(Shared {
        pending: Mutex::new(Vec::with_capacity(FLUSH_BYTES)),
        wake: Condvar::new(),
        closing: AtomicBool::new(false),
        dropped: AtomicU64::new(0),
    });
    let writer = Arc::clone(&shared);
    let thread = thread::Builder::new()
        .name("petstore-log".into())
        .spawn(move || writer.write_loop(out))?;
    Ok((
        Sink {
            shared: Arc::clone(&shared),
        },
        Flusher {
            shared,
            thread: Some(thread),
        },
    ))
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_loop(&self, mut out: impl Write) {
        let mut batch = Vec::with_capacity(FLUSH_BYTES);
        loop {
            let closing = {
                let pending = self.lock();
                let (mut pending, _) = self
                    .wake
                    .wait_timeout_while(pending, FLUSH_INTERVAL, |p| {
                        p.len() < FLUSH_BYTES && !self.closing.load(Ordering::Acquire)
                    })
                    .unwrap_or_else(PoisonError::into_inner);
                std::mem::swap(&mut *pending, &mut batch);
                self.closing.load(Ordering::Acquire)
            };
            let dropped = self.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                let _ = writeln!(
                    batch,
                    "log: {dropped} lines dropped: stderr did not keep up"
                );
            }
            // Nowhere to report a failed write of the log itself; the next batch tries again.
            let _ = out.write_all(&batch).and_then(|()| out.flush());
            batch.clear();
            if closing && self.lock().is_empty() {
                return;
            }
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One event's writer: tracing formats a whole line, then writes it with one call.
pub struct LineWriter<'a>(&'a Shared);

impl Write for LineWriter<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let mut pending = self.0.lock();
        if pending.len() + line.len() > MAX_PENDING_BYTES {
            self.0.dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            pending.extend_from_slice(line);
            if pending.len() >= FLUSH_BYTES {
                self.0.wake.notify_one();
            }
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter(&self.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Write` the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_is_written_in_order_by_the_time_the_flusher_is_dropped() {
        let out = Captured::default();
        let (sink, flusher) = start(out.clone()).expect("thread");
        for i in 0..1000 {
            sink.make_writer()
                .write_all(format!("line {i}\n").as_bytes())
                .expect("write");
        }
        drop(flusher);
        let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
        let expected: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        assert_eq!(text, expected);
    }

    #[test]
    fn lines_past_the_bound_are_dropped_and_counted_not_queued() {
        let shared = Shared {
            pending: Mutex::new(Vec::new()),
            wake: Condvar::new(),
            closing: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        };
        let line = vec![b'x'; 1024 * 1024];
        for _ in 0..6 {
            LineWriter(&shared).write_all(&line).expect("write");
        }
        assert_eq!(shared.lock().len(), MAX_PENDING_BYTES);
        assert_eq!(shared.dropped.load(Ordering::Relaxed), 2);
    }
}
