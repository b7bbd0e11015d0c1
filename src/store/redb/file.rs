//! The database file as redb sees it: redb's own `FileBackend`, except that space the file
//! grows by is written with zeros, a chunk around each of redb's first writes into it, just
//! before that write. Why: a write into a hole makes the filesystem allocate blocks, and the
//! commit's fdatasync must then also make that allocation durable (on ext4, the inode and its
//! block map: more writes and waits on every commit, or a journal commit). Overwriting blocks
//! that already hold zeros changes no metadata, so a commit's fdatasync writes its pages and
//! flushes. Invariant: redb has written nothing in a range `Holes` holds since the file grew
//! over it, so zeros written there never cover its data; holes lie inside the file, so a fill
//! never grows it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::{Mutex, PoisonError};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// The span of file zero-filled around a write: one block allocation, made durable by one
/// commit, for every chunk the store grows into, not one for every commit. A larger chunk
/// makes the commit that fills it wait longer.
const FILL_CHUNK: u64 = 1 << 20;

/// A fill writes one page at a time. A larger write makes Linux cache the range as one large
/// folio, and each later 4 KiB write of redb's into it dirties and writes back the whole
/// folio: with 64 KiB writes, creates wrote six times the bytes to the disk (Linux 6.18).
static ZEROS: [u8; 4096] = [0; 4096];

#[derive(Debug)]
pub(super) struct Filled {
    inner: FileBackend,
    holes: Mutex<Holes>,
}

/// Ranges of the file redb has not written since the file grew over them: start to end.
#[derive(Debug, Default)]
struct Holes(BTreeMap<u64, u64>);

impl Holes {
    /// The file grew from `from` to `to`.
    fn grew(&mut self, from: u64, to: u64) {
        if from < to {
            self.0.insert(from, to);
        }
    }

    /// The file was cut to `len`: nothing past it is a hole any more.
    fn cut(&mut self, len: u64) {
        self.0.retain(|&start, _| start < len);
        for end in self.0.values_mut() {
            *end = (*end).min(len);
        }
    }

    /// Takes every part of a hole inside `from..to` out of the set and returns them.
    fn take(&mut self, from: u64, to: u64) -> Vec<(u64, u64)> {
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..to)
            .filter(|&(_, &end)| end > from)
            .map(|(&start, &end)| (start, end))
            .collect();
        let mut taken = Vec::with_capacity(overlapping.len());
        for (start, end) in overlapping {
            self.0.remove(&start);
            if start < from {
                self.0.insert(start, from);
            }
            if end > to {
                self.0.insert(to, end);
            }
            taken.push((start.max(from), end.min(to)));
        }
        taken
    }
}

impl Filled {
    /// The file as it is now counts as written: holes in a file from before are left alone,
    /// only the space it grows by from here is filled.
    pub(super) fn new(file: File) -> io::Result<Filled> {
        let inner = FileBackend::new(file).map_err(io::Error::other)?;
        Ok(Filled {
            inner,
            holes: Mutex::new(Holes::default()),
        })
    }

    fn holes(&self) -> std::sync::MutexGuard<'_, Holes> {
        self.holes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl StorageBackend for Filled {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut holes = self.holes();
        let before = self.inner.len()?;
        self.inner.set_len(len)?;
        holes.cut(len);
        holes.grew(before, len);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        // Held over the fill and the write: another thread's write into the chunk must not
        // land between the fill's take and its zeros (redb writes from one thread at a time,
        // so this is an uncontended lock).
        let mut holes = self.holes();
        if !holes.0.is_empty() {
            let end = offset.saturating_add(data.len() as u64);
            let from = offset - offset % FILL_CHUNK;
            let to = end.div_ceil(FILL_CHUNK).saturating_mul(FILL_CHUNK);
            // A fill that fails is this write's error to redb, which then refuses writes until
            // the file is reopened; the rest of its range is left to the filesystem.
            for (mut at, hole_end) in holes.take(from, to) {
                while at < hole_end {
                    let n = (hole_end - at).min(ZEROS.len() as u64) as usize;
                    self.inner.write(at, &ZEROS[..n])?;
                    at += n as u64;
                }
            }
        }
        self.inner.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    const MIB: u64 = 1 << 20;

    fn backend() -> (tempfile::TempDir, Filled) {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("pets.redb"))
            .expect("open");
        (dir, Filled::new(file).expect("backend"))
    }

    /// Bytes the filesystem has allocated to the file.
    fn allocated(dir: &tempfile::TempDir) -> u64 {
        let meta = std::fs::metadata(dir.path().join("pets.redb")).expect("metadata");
        meta.blocks() * 512
    }

    fn read(file: &Filled, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0xAA; len];
        file.read(offset, &mut out).expect("read");
        out
    }

    #[test]
    fn holes_are_taken_once_split_and_cut() {
        let mut holes = Holes::default();
        holes.grew(10, 100);
        assert_eq!(holes.take(20, 30), vec![(20, 30)]);
        assert_eq!(holes.take(0, 40), vec![(10, 20), (30, 40)]);
        assert_eq!(holes.take(25, 35), Vec::<(u64, u64)>::new());
        holes.cut(70);
        holes.grew(70, 200);
        assert_eq!(holes.take(0, 1000), vec![(40, 70), (70, 200)]);
        assert!(holes.0.is_empty());
        holes.grew(5, 5);
        assert!(holes.0.is_empty());
    }

    #[test]
    fn a_write_into_new_space_fills_its_chunk_and_no_more() {
        let (dir, file) = backend();
        file.set_len(8 * MIB).expect("grow");
        assert!(allocated(&dir) < MIB / 4, "a grown file starts as a hole");

        file.write(5 * MIB + 100, b"pet").expect("write");
        let after_fill = allocated(&dir);
        assert!(
            (MIB..2 * MIB).contains(&after_fill),
            "one chunk allocated, got {after_fill}"
        );
        assert_eq!(read(&file, 5 * MIB + 100, 3), b"pet");
        assert_eq!(read(&file, 5 * MIB, 100), vec![0; 100]);
        assert_eq!(read(&file, 6 * MIB - 4096, 4096), vec![0; 4096]);

        // The same chunk again: nothing more is filled, and the first write stays.
        file.write(5 * MIB + 8192, b"cat").expect("write");
        assert_eq!(allocated(&dir), after_fill);
        assert_eq!(read(&file, 5 * MIB + 100, 3), b"pet");
        assert_eq!(
            file.len().expect("len"),
            8 * MIB,
            "a fill never grows the file"
        );
    }

    #[test]
    fn space_from_before_and_written_space_are_never_filled_over() {
        let (dir, file) = backend();
        file.set_len(2 * MIB).expect("grow");
        file.write(MIB + 10, b"first").expect("write");
        drop(file);

        // Reopened: the file as it was counts as written, and holes in it stay holes.
        let reopened = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("pets.redb"))
            .expect("open");
        let file = Filled::new(reopened).expect("backend");
        let before = allocated(&dir);
        file.write(10, b"head").expect("write");
        assert_eq!(allocated(&dir), before + 4096, "only the page written");

        // Cut into the written chunk and grown again: only the new space is filled.
        file.set_len(MIB + 4096).expect("cut");
        file.set_len(3 * MIB).expect("grow");
        file.write(MIB + 8192, b"second").expect("write");
        assert_eq!(read(&file, MIB + 10, 5), b"first");
        assert_eq!(read(&file, MIB + 8192, 6), b"second");
        assert_eq!(read(&file, 10, 4), b"head");
        assert_eq!(file.len().expect("len"), 3 * MIB);
    }
}
