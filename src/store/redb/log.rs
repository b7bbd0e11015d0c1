//! The write-ahead log beside the redb file (`FILE-log/`): what makes a batch durable with one
//! append and one `fdatasync`, where redb's own durable commit rewrote every touched table's
//! path and synced twice. The log is a row of numbered segments, each a file of its full size,
//! zero-filled and synced before its first use (so a full disk fails the preparation, never an
//! append after an answer, and an `fdatasync` of an append changes no metadata). A segment
//! names the log it belongs to (the file's `wal_id`), its number and, once the writer first
//! writes in it, its first batch; then come the batches' records, each with its number and a
//! checksum, and at the end a seal naming its last batch. A segment is written by one writer
//! in one life of the file only: after any failure the store reads the log back from the disk
//! and goes on in a new segment, never writing the old one again.
//!
//! Invariants: every batch after the file's last durable checkpoint is in the log, in order,
//! in segments numbered one after another; a record counts only if it verifies and its batch
//! follows the one before; the first batch a segment names supersedes whatever an earlier one
//! holds from that batch on. Recovery reads the disk, not the page cache (`O_DIRECT`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::store::model::StoreError;

/// The size a segment is prepared at: about 6,000 creates of 700 bytes, and two of them (the
/// one in use and the next) are what the log holds ahead on a disk. A batch whose record is
/// larger gets a segment of its own, sized for it.
pub(super) const SEGMENT_BYTES: u64 = 4 << 20;
/// The segment's first block: its header, then its records.
const HEADER_BYTES: u64 = 4096;
const MAGIC: [u8; 8] = *b"PETSLOG1";
/// A record's kind: a batch's table writes, or the seal that ends a segment.
const BATCH: u32 = 1;
const SEAL: u32 = 2;
/// A record's head: kind, payload length, batch number, checksum, and 4 bytes of zeros.
const RECORD_HEAD: usize = 24;
/// Room every segment keeps for its seal.
const SEAL_BYTES: u64 = (RECORD_HEAD + 8) as u64;
/// How long after a failed preparation of a segment the writer refuses at once.
const PREPARE_PACE: std::time::Duration = std::time::Duration::from_millis(250);
/// Reads of a segment from the disk go in chunks of this many bytes (aligned for `O_DIRECT`).
const READ_CHUNK: usize = 1 << 20;
/// A zero-fill writes one page at a time: a larger write makes Linux cache the range as one
/// large folio, and each append's `fdatasync` would then write the whole folio back
/// (`redb/file.rs` measured six times the bytes with 64 KiB writes).
static ZEROS: [u8; 4096] = [0; 4096];

/// The log's directory beside the database file: `pets.redb` keeps `pets.redb-log/`.
pub(super) fn dir_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-log");
    PathBuf::from(name)
}

/// The database file whose log `dir` is.
fn db_of(dir: &Path) -> PathBuf {
    let name = dir.as_os_str().to_string_lossy();
    PathBuf::from(name.strip_suffix("-log").unwrap_or(&name))
}

fn segment_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:016}.log"))
}

fn crc(parts: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize()
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

/// The checksum of a segment's activation: its first batch, bound to the log and the segment.
fn activation_crc(id: u64, number: u64, first: u64) -> u32 {
    crc(&[
        &id.to_le_bytes(),
        &number.to_le_bytes(),
        &first.to_le_bytes(),
    ])
}

/// Creates segment `number` of log `id`, `bytes` long: header, zeros, synced, then renamed into
/// place and the directory synced, so a segment that exists is whole. Its first batch is
/// written when the writer starts on it (`Appender::activate`).
pub(super) fn prepare(dir: &Path, id: u64, number: u64, bytes: u64) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let temporary = dir.join(format!("{number:016}.tmp"));
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)?;
    let mut header = [0u8; 4096];
    header[..8].copy_from_slice(&MAGIC);
    header[8..16].copy_from_slice(&id.to_le_bytes());
    header[16..24].copy_from_slice(&number.to_le_bytes());
    header[24..32].copy_from_slice(&bytes.to_le_bytes());
    let sum = crc(&[&header[..32]]);
    header[32..36].copy_from_slice(&sum.to_le_bytes());
    let filled = (|| {
        file.write_all_at(&header, 0)?;
        let mut at = HEADER_BYTES;
        while at < bytes {
            let n = (bytes - at).min(ZEROS.len() as u64) as usize;
            file.write_all_at(&ZEROS[..n], at)?;
            at += n as u64;
        }
        file.sync_all()
    })();
    if let Err(e) = filled {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    drop(file);
    std::fs::rename(&temporary, segment_path(dir, number))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Why an append failed.
#[derive(Debug)]
pub(super) enum AppendError {
    /// Nothing of the record was written: no segment could be made for it (a full disk).
    NotWritten(io::Error),
    /// Writing or syncing the record failed: the disk may hold it or not.
    InDoubt(io::Error),
}

/// The segment the writer appends to.
struct Active {
    file: File,
    number: u64,
    /// Where the next record goes.
    at: u64,
    bytes: u64,
    first: u64,
}

/// The writer's end of the log: the segment it appends to. Each `append` is one write and one
/// `fdatasync` of that segment; filling a segment seals it and goes on in the next.
pub(super) struct Appender {
    dir: PathBuf,
    id: u64,
    active: Option<Active>,
    /// The number the next segment gets: above every segment this log has had.
    next_number: u64,
    /// The segments this life of the file has activated, with their first batch: what the
    /// checkpoints cut the log back by (`cut`).
    segments: Vec<(u64, u64)>,
    /// The last batch the log holds.
    last: u64,
    /// Segments sealed since the checkpoints thread last synced them.
    sealed: Vec<File>,
    /// When the writer's last preparation of a segment failed.
    failed_at: Option<std::time::Instant>,
}

impl Appender {
    /// The end of log `id` in `dir`, after a recovery that found segments up to
    /// `next_number - 1` (`Recovered`): nothing is appended to them; the first append
    /// activates a new one.
    pub(super) fn new(dir: PathBuf, id: u64, recovered: &Recovered) -> Appender {
        Appender {
            dir,
            id,
            active: None,
            next_number: recovered.next_number,
            segments: recovered.segments.clone(),
            last: recovered.last,
            sealed: Vec::new(),
            failed_at: None,
        }
    }

    /// Whether no segment is begun (one could not be made: a full disk) and a durable
    /// checkpoint of batch `checkpoint` holds every batch the log does: the file then needs no
    /// log, and the old segments' room is better given back (`wal.rs` retires the log).
    pub(super) fn stalled_and_covered(&self, checkpoint: u64) -> bool {
        self.active.is_none() && self.last <= checkpoint
    }

    /// Makes batch `number`'s record (its table writes, `payload`) durable: one positioned
    /// write and one `fdatasync`. A record that does not fit what is left of the segment seals
    /// it and goes into the next. An error writing the record leaves the segment for good (the
    /// store recovers from the disk and goes on in a new one).
    pub(super) fn append(&mut self, number: u64, payload: &[u8]) -> Result<(), AppendError> {
        let length = record_length(payload.len());
        let mut sealed = None;
        if let Some(active) = self.active.take() {
            if active.at + length + SEAL_BYTES <= active.bytes {
                self.active = Some(active);
            } else {
                let seal = record(
                    self.id,
                    active.number,
                    SEAL,
                    number - 1,
                    &active.first.to_le_bytes(),
                );
                active
                    .file
                    .write_all_at(&seal, active.at)
                    .map_err(AppendError::NotWritten)?;
                sealed = Some(active.file);
            }
        }
        if self.active.is_none() {
            let needed = HEADER_BYTES + length + SEAL_BYTES;
            self.activate(number, needed.max(SEGMENT_BYTES))
                .map_err(AppendError::NotWritten)?;
        }
        let Some(active) = self.active.as_mut() else {
            return Err(AppendError::NotWritten(io::Error::other("no segment")));
        };
        let bytes = record(self.id, active.number, BATCH, number, payload);
        let outcome = active
            .file
            .write_all_at(&bytes, active.at)
            .and_then(|()| active.file.sync_data());
        if let Err(e) = outcome {
            self.active = None;
            return Err(AppendError::InDoubt(e));
        }
        active.at += length;
        self.last = number;
        if let Some(sealed) = sealed {
            // The seal is not needed to read the log back (the next segment names where it
            // begins): it is synced by the checkpoints thread (`sync_sealed`), off the path.
            self.sealed.push(sealed);
        }
        Ok(())
    }

    /// Syncs the seals written since the last call: a sealed segment is then whole on the
    /// disk, first batch to last, as the off-box copies will ship it.
    pub(super) fn sync_sealed(&mut self) -> io::Result<()> {
        for sealed in self.sealed.drain(..) {
            sealed.sync_data()?;
        }
        Ok(())
    }

    /// Starts a new segment at batch `first` and makes that durable at once: after a recovery,
    /// so that whatever the old segment holds from `first` on (a batch whose sync failed) is
    /// superseded before anything else is answered, and on a new log, so that it names where it
    /// begins before the file names the log.
    pub(super) fn begin(&mut self, first: u64) -> io::Result<()> {
        self.active = None;
        self.activate(first, SEGMENT_BYTES)?;
        let active = self
            .active
            .as_ref()
            .ok_or_else(|| io::Error::other("no segment"))?;
        let synced = active.file.sync_data();
        if synced.is_err() {
            self.active = None;
        }
        synced
    }

    /// Starts the next segment at batch `first`: the spare a checkpoint prepared, or one
    /// prepared now, `bytes` long at least.
    fn activate(&mut self, first: u64, bytes: u64) -> io::Result<()> {
        let number = self.next_number;
        let path = segment_path(&self.dir, number);
        let spare = std::fs::metadata(&path).map(|meta| meta.len()).ok();
        let sound = spare.is_some_and(|length| length >= bytes) && self.spare_is_sound(&path);
        if !sound {
            // After a preparation that failed (a full disk), the writes that follow are
            // refused at once for a while rather than each write 4 MiB of zeros into a sync
            // that fails: the checkpoints thread tries every second, and its spare is taken
            // up as soon as it is there.
            if let Some(failed) = self.failed_at
                && failed.elapsed() < PREPARE_PACE
            {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    "no room for a new segment (the last try failed just now)",
                ));
            }
            if spare.is_some() {
                std::fs::remove_file(&path)?;
            }
            if let Err(e) = prepare(&self.dir, self.id, number, bytes) {
                self.failed_at = Some(std::time::Instant::now());
                return Err(e);
            }
            self.failed_at = None;
        }
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let length = file.metadata()?.len();
        let mut activation = [0u8; 16];
        activation[..8].copy_from_slice(&first.to_le_bytes());
        activation[8..12].copy_from_slice(&activation_crc(self.id, number, first).to_le_bytes());
        // Made durable by the first append's fdatasync, in the same file.
        file.write_all_at(&activation, 40)?;
        self.next_number = number + 1;
        self.segments.push((number, first));
        self.active = Some(Active {
            file,
            number,
            at: HEADER_BYTES,
            bytes: length,
            first,
        });
        Ok(())
    }

    /// Whether the spare at `path` has the header of this log's next segment, as it is read
    /// now: a spare that lost its header is made again rather than taken up.
    fn spare_is_sound(&self, path: &Path) -> bool {
        let mut head = [0u8; 64];
        File::open(path)
            .and_then(|file| file.read_exact_at(&mut head, 0))
            .is_ok_and(|()| verify_header(&head, self.id, self.next_number, path).is_ok())
    }

    /// Prepares the next segment ahead, unless it is there: run by the checkpoints, off the
    /// writer's path.
    pub(super) fn spare_needed(&self) -> Option<(PathBuf, u64, u64)> {
        let number = self.next_number;
        (!segment_path(&self.dir, number).exists()).then(|| (self.dir.clone(), self.id, number))
    }

    /// Removes the segments every batch of which is in the durable checkpoint of batch
    /// `checkpoint`: those before the last one that begins at or before `checkpoint + 1`.
    pub(super) fn cut(&mut self, checkpoint: u64) {
        let keep_from = self
            .segments
            .iter()
            .rev()
            .find(|(_, first)| *first <= checkpoint + 1)
            .map(|(number, _)| *number);
        let Some(keep_from) = keep_from else { return };
        self.segments.retain(|(number, _)| {
            if *number >= keep_from {
                return true;
            }
            let _ = std::fs::remove_file(segment_path(&self.dir, *number));
            false
        });
    }

    /// Removes every segment: the file holds every batch durably and names no log any more.
    pub(super) fn remove_all(&mut self) {
        self.active = None;
        self.segments.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn record_length(payload: usize) -> u64 {
    ((RECORD_HEAD + payload).div_ceil(8) * 8) as u64
}

/// A record as it goes to the disk, padded to 8 bytes.
fn record(id: u64, segment: u64, kind: u32, batch: u64, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(record_length(payload.len()) as usize);
    bytes.extend_from_slice(&kind.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&batch.to_le_bytes());
    let sum = crc(&[
        &id.to_le_bytes(),
        &segment.to_le_bytes(),
        &bytes[..16],
        payload,
    ]);
    bytes.extend_from_slice(&sum.to_le_bytes());
    bytes.extend_from_slice(&[0; 4]);
    bytes.extend_from_slice(payload);
    bytes.resize(record_length(payload.len()) as usize, 0);
    bytes
}

/// What reading the log back found.
#[derive(Clone, Debug, Default)]
pub(super) struct Recovered {
    /// The last batch the log holds (the checkpoint's own when it holds none after it).
    pub(super) last: u64,
    /// The batches applied, after the checkpoint.
    pub(super) applied: u64,
    /// The activated segments, with their first batch, in order.
    pub(super) segments: Vec<(u64, u64)>,
    /// The number the next segment gets: after the last one begun.
    pub(super) next_number: u64,
    /// Segments that are zeros from end to end: prepared, but the disk never got them.
    pub(super) blank: Vec<u64>,
}

/// One segment as the disk holds it.
struct Read {
    number: u64,
    bytes: Vec<u8>,
}

/// Reads log `id` in `dir` back from the disk and gives `apply` every batch after
/// `checkpoint`, in order, each once, as its payload. Refused (`LogLost`), with what was found,
/// when the log cannot hold every batch after the checkpoint: the directory or the segment that
/// holds batch `checkpoint + 1` missing, a segment of another log or another file, one shorter
/// than it was made, a segment missing between two, or one that ends before the next begins.
/// A record that does not verify at the end of the last segment is a batch whose sync never
/// returned: nothing was answered for it, and it is left out.
pub(super) fn recover(
    dir: &Path,
    id: u64,
    checkpoint: u64,
    mut apply: impl FnMut(u64, &[u8]) -> Result<(), StoreError>,
) -> Result<Recovered, StoreError> {
    let lost = |what: String| {
        StoreError::LogLost(format!(
            "{what}; the file's batches after {checkpoint} are in its write-ahead log \
             {}, which must be beside it as the server left it: put it back, or run \
             `petstore check --db {}` and restore the newest snapshot (docs/operations.md, \
             Backups and restore)",
            dir.display(),
            db_of(dir).display()
        ))
    };
    let names = match std::fs::read_dir(dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(lost(format!("the log {} is missing", dir.display())));
        }
        Err(e) => return Err(StoreError::Io(format!("{}: {e}", dir.display()))),
    };
    let mut numbers = Vec::new();
    for name in names {
        let name = name.map_err(|e| StoreError::Io(format!("{}: {e}", dir.display())))?;
        let name = name.file_name();
        let name = name.to_string_lossy();
        // Anything else (a `.tmp` a crash left mid-preparation, never used) is no segment.
        if let Some(number) = name
            .strip_suffix(".log")
            .and_then(|n| n.parse::<u64>().ok())
        {
            numbers.push(number);
        }
    }
    numbers.sort_unstable();
    let mut headers = Vec::new();
    let mut blank = Vec::new();
    for &number in &numbers {
        let path = segment_path(dir, number);
        let head = read_from_disk(&path, Some(HEADER_BYTES as usize))
            .map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))?;
        if head.iter().all(|&b| b == 0) && is_blank(&path)? {
            // A spare whose preparation never reached the disk, though its sync said so (a
            // device that loses a write it reported done): it holds nothing, and is no
            // segment. The open removes it (`remove_blank`) so that it is never taken up.
            blank.push(number);
            continue;
        }
        let first = verify_header(&head, id, number, &path).map_err(&lost)?;
        let made = u64_at(&head, 24);
        let length = std::fs::metadata(&path)
            .map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))?
            .len();
        if length < made {
            return Err(lost(format!(
                "segment {} is {length} bytes, cut short of the {made} it was made with",
                path.display()
            )));
        }
        headers.push((number, first));
    }
    let activated: Vec<(u64, u64)> = headers
        .iter()
        .filter_map(|(number, first)| first.map(|first| (*number, first)))
        .collect();
    let Some(start) = activated
        .iter()
        .rposition(|(_, first)| *first <= checkpoint + 1)
    else {
        return Err(lost(format!(
            "no segment of the log begins at or before batch {}",
            checkpoint + 1
        )));
    };
    let chain = &activated[start..];
    // The next segment goes after the last one begun; a spare prepared there, never begun, is
    // the one it takes.
    let next_number = activated.last().map_or(1, |(number, _)| number + 1);
    for pair in chain.windows(2) {
        if pair[1].0 != pair[0].0 + 1 {
            return Err(lost(format!(
                "segment {} is missing between {} and {}",
                pair[0].0 + 1,
                pair[0].0,
                pair[1].0
            )));
        }
    }
    let mut last = checkpoint;
    let mut applied = 0;
    for (at, &(number, first)) in chain.iter().enumerate() {
        let ends_before = chain.get(at + 1).map(|(_, next)| *next);
        let path = segment_path(dir, number);
        let bytes = read_from_disk(&path, None)
            .map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))?;
        let segment = Read { number, bytes };
        let mut expected = first;
        for (batch, payload) in records(&segment, id) {
            if ends_before.is_some_and(|next| batch >= next) {
                break;
            }
            if batch != expected {
                return Err(lost(format!(
                    "segment {} holds batch {batch} where batch {expected} belongs",
                    path.display()
                )));
            }
            expected += 1;
            if batch > checkpoint {
                apply(batch, payload)?;
                applied += 1;
                last = batch;
            }
        }
        if let Some(next) = ends_before
            && expected < next
        {
            return Err(lost(format!(
                "segment {} ends at batch {}, and the next begins at {next}",
                path.display(),
                expected.saturating_sub(1)
            )));
        }
        if expected <= checkpoint && ends_before.is_none() {
            return Err(lost(format!(
                "the log ends at batch {}, before the checkpoint's {checkpoint}",
                expected.saturating_sub(1)
            )));
        }
    }
    Ok(Recovered {
        last,
        applied,
        segments: chain.to_vec(),
        next_number,
        blank,
    })
}

/// Whether the segment at `path` is zeros from end to end, as the disk holds it.
fn is_blank(path: &Path) -> Result<bool, StoreError> {
    let bytes = read_from_disk(path, None)
        .map_err(|e| StoreError::Io(format!("{}: {e}", path.display())))?;
    Ok(bytes.iter().all(|&b| b == 0))
}

/// Removes the blank segments a recovery found in `dir`.
pub(super) fn remove_blank(dir: &Path, recovered: &Recovered) {
    for &number in &recovered.blank {
        let _ = std::fs::remove_file(segment_path(dir, number));
    }
}

/// The first batch of the segment whose first block is `head` (`None`: never written to),
/// or why it is not a segment of log `id` numbered `number`.
fn verify_header(head: &[u8], id: u64, number: u64, path: &Path) -> Result<Option<u64>, String> {
    if head.len() < 64 || head[..8] != MAGIC || u32_at(head, 32) != crc(&[&head[..32]]) {
        let what = if head.len() < 64 {
            format!("{} bytes long", head.len())
        } else if head.iter().all(|&b| b == 0) {
            "its first block is zeros".to_owned()
        } else {
            format!("its header does not verify ({:02x?})", &head[..40])
        };
        return Err(format!(
            "{} is not a segment of a petstore log: {what}",
            path.display()
        ));
    }
    if u64_at(head, 8) != id {
        return Err(format!(
            "{} belongs to another file's log (log {:016x}, the file's is {id:016x})",
            path.display(),
            u64_at(head, 8)
        ));
    }
    if u64_at(head, 16) != number {
        return Err(format!(
            "{} says it is segment {}",
            path.display(),
            u64_at(head, 16)
        ));
    }
    let first = u64_at(head, 40);
    Ok((first != 0 && u32_at(head, 48) == activation_crc(id, number, first)).then_some(first))
}

/// The batch records of `segment` that verify, in order, up to the first that does not (or
/// the seal).
fn records<'a>(segment: &'a Read, id: u64) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
    let bytes = &segment.bytes;
    let mut at = HEADER_BYTES as usize;
    std::iter::from_fn(move || {
        let head = bytes.get(at..at + RECORD_HEAD)?;
        let kind = u32_at(head, 0);
        let length = u32_at(head, 4) as usize;
        let batch = u64_at(head, 8);
        if kind != BATCH {
            return None;
        }
        let payload = bytes.get(at + RECORD_HEAD..at + RECORD_HEAD + length)?;
        let sum = crc(&[
            &id.to_le_bytes(),
            &segment.number.to_le_bytes(),
            &head[..16],
            payload,
        ]);
        if sum != u32_at(head, 16) {
            return None;
        }
        at += record_length(length) as usize;
        Some((batch, payload))
    })
}

/// The first and the last batch a sealed segment's seal names (`None`: not sealed, or a seal
/// that does not verify). Tests only for now; the off-box copies will ship segments by it.
#[cfg(test)]
fn seal_of(path: &Path, id: u64, number: u64) -> io::Result<Option<(u64, u64)>> {
    let bytes = read_from_disk(path, None)?;
    let segment = Read { number, bytes };
    let mut at = HEADER_BYTES as usize;
    for (_, payload) in records(&segment, id) {
        at += record_length(payload.len()) as usize;
    }
    let Some(head) = segment.bytes.get(at..at + RECORD_HEAD + 8) else {
        return Ok(None);
    };
    let sum = crc(&[
        &id.to_le_bytes(),
        &number.to_le_bytes(),
        &head[..16],
        &head[RECORD_HEAD..],
    ]);
    let sealed = u32_at(head, 0) == SEAL && u32_at(head, 4) == 8 && sum == u32_at(head, 16);
    Ok(sealed.then(|| (u64_at(head, RECORD_HEAD), u64_at(head, 8))))
}

/// The file at `path` as the disk holds it (the first `limit` bytes, or all), read with
/// `O_DIRECT` past the page cache: after a failed write-back the cache can hold pages the
/// disk never got. Where the file system has no `O_DIRECT` (tmpfs, whose only copy is the
/// page cache), it is read as it is.
fn read_from_disk(path: &Path, limit: Option<usize>) -> io::Result<Vec<u8>> {
    let direct = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path);
    let (file, aligned) = match direct {
        Ok(file) => (file, true),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            (OpenOptions::new().read(true).open(path)?, false)
        }
        Err(e) => return Err(e),
    };
    let length = file.metadata()?.len() as usize;
    let wanted = limit.map_or(length, |limit| limit.min(length));
    let chunk = READ_CHUNK;
    let mut raw = vec![0u8; wanted.div_ceil(4096) * 4096 + 4096];
    let offset = if aligned {
        raw.as_ptr().align_offset(4096)
    } else {
        0
    };
    let mut done = 0;
    while done < wanted {
        let n = (wanted.div_ceil(4096) * 4096 - done).min(chunk);
        let read = file.read_at(&mut raw[offset + done..offset + done + n], done as u64)?;
        if read == 0 {
            break;
        }
        done += read;
    }
    raw.drain(..offset);
    raw.truncate(done.min(wanted));
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: u64 = 0x5eed;

    /// The batches the log gives after `checkpoint`, with their payloads.
    type Given = Vec<(u64, Vec<u8>)>;

    fn replayed(dir: &Path, checkpoint: u64) -> Result<(Given, Recovered), String> {
        let mut seen = Vec::new();
        recover(dir, ID, checkpoint, |batch, payload| {
            seen.push((batch, payload.to_vec()));
            Ok(())
        })
        .map(|recovered| (seen, recovered))
        .map_err(|e| e.to_string())
    }

    fn appender(dir: &Path) -> Appender {
        let recovered = Recovered {
            next_number: 1,
            ..Recovered::default()
        };
        Appender::new(dir.to_owned(), ID, &recovered)
    }

    #[test]
    fn every_appended_batch_reads_back_in_order_across_segments() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = dir_of(&temp.path().join("pets.redb"));
        let mut log = appender(&dir);
        // A payload of a third of a segment: every third batch seals one and starts the next.
        let payload = vec![7u8; (SEGMENT_BYTES / 3) as usize];
        for batch in 1..=7 {
            log.append(batch, &payload[..payload.len() - batch as usize])
                .expect("append");
        }
        assert!(log.segments.len() >= 3, "{:?}", log.segments);
        // Each full segment is sealed with its first and last batch; the one in use is not.
        let seals: Vec<_> = log
            .segments
            .iter()
            .map(|(number, _)| seal_of(&segment_path(&dir, *number), ID, *number).expect("reads"))
            .collect();
        assert_eq!(seals[0], Some((1, 2)), "{seals:?}");
        assert_eq!(seals[1].map(|(first, _)| first), Some(3), "{seals:?}");
        assert_eq!(seals.last(), Some(&None), "{seals:?}");
        let (seen, recovered) = replayed(&dir, 0).expect("recovers");
        let batches: Vec<u64> = seen.iter().map(|(batch, _)| *batch).collect();
        assert_eq!(batches, (1..=7).collect::<Vec<_>>());
        assert_eq!(seen[3].1.len(), payload.len() - 4);
        assert_eq!((recovered.last, recovered.applied), (7, 7));
        // After a checkpoint of batch 5, only 6 and 7 are given, and the cut keeps them.
        let (seen, _) = replayed(&dir, 5).expect("recovers");
        assert_eq!(seen.iter().map(|(b, _)| *b).collect::<Vec<_>>(), [6, 7]);
        log.cut(5);
        let (seen, _) = replayed(&dir, 5).expect("recovers after the cut");
        assert_eq!(seen.len(), 2);
    }

    #[test]
    fn a_torn_last_record_is_left_out_and_a_new_segment_supersedes_the_old_one() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = dir_of(&temp.path().join("pets.redb"));
        let mut log = appender(&dir);
        for batch in 1..=3 {
            log.append(batch, b"a batch").expect("append");
        }
        // Batch 3's record torn: its last byte changed.
        let path = segment_path(&dir, 1);
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        let third = HEADER_BYTES + 2 * record_length(7);
        file.write_all_at(b"X", third + RECORD_HEAD as u64 + 6)
            .expect("tear");
        let (seen, recovered) = replayed(&dir, 0).expect("recovers");
        assert_eq!(recovered.last, 2);
        assert_eq!(seen.len(), 2);
        // The store goes on in a new segment from batch 3; the torn record stays behind.
        let mut log = Appender::new(dir.clone(), ID, &recovered);
        log.append(3, b"batch three, again").expect("append");
        let (seen, _) = replayed(&dir, 0).expect("recovers");
        assert_eq!(
            seen.last().map(|(b, p)| (*b, p.clone())),
            Some((3, b"batch three, again".to_vec()))
        );
    }

    #[test]
    fn a_missing_foreign_or_short_log_is_refused_with_what_was_found() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = dir_of(&temp.path().join("pets.redb"));
        let missing = replayed(&dir, 4).expect_err("no log");
        assert!(missing.contains("is missing"), "{missing}");
        let mut log = appender(&dir);
        log.append(1, b"one").expect("append");
        // Another file's log.
        let foreign = recover(&dir, ID + 1, 0, |_, _| Ok(())).expect_err("foreign");
        assert!(
            foreign.to_string().contains("another file's log"),
            "{foreign}"
        );
        // A checkpoint the log does not reach: batches after it would be lost.
        let behind = replayed(&dir, 9).expect_err("behind");
        assert!(behind.contains("before the checkpoint"), "{behind}");
        // Cut short.
        let path = segment_path(&dir, 1);
        let file = OpenOptions::new().write(true).open(&path).expect("open");
        file.set_len(SEGMENT_BYTES / 2).expect("truncate");
        let short = replayed(&dir, 0).expect_err("short");
        assert!(short.contains("cut short"), "{short}");
    }

    #[test]
    fn a_spare_the_disk_never_got_is_no_segment_and_is_made_again() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = dir_of(&temp.path().join("pets.redb"));
        let mut log = appender(&dir);
        log.append(1, b"one").expect("append");
        prepare(&dir, ID, 2, SEGMENT_BYTES).expect("a spare");
        // The spare as a disk that lost it holds it: zeros end to end.
        let spare = segment_path(&dir, 2);
        std::fs::write(&spare, vec![0u8; SEGMENT_BYTES as usize]).expect("zeros");
        let (seen, recovered) = replayed(&dir, 0).expect("recovers");
        assert_eq!((seen.len(), recovered.blank.clone()), (1, vec![2]));
        remove_blank(&dir, &recovered);
        assert!(!spare.exists());
        // A spare whose header does not read back is made again, not taken up.
        prepare(&dir, ID, 2, SEGMENT_BYTES).expect("a spare");
        let file = OpenOptions::new().write(true).open(&spare).expect("open");
        file.write_all_at(&[0u8; 64], 0).expect("lose the header");
        let mut log = Appender::new(dir.clone(), ID, &recovered);
        log.append(2, b"two")
            .expect("append into a spare made again");
        let (seen, _) = replayed(&dir, 0).expect("recovers");
        assert_eq!(seen.iter().map(|(b, _)| *b).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn a_segment_missing_between_two_is_refused() {
        let temp = tempfile::tempdir().expect("temp dir");
        let dir = dir_of(&temp.path().join("pets.redb"));
        let mut log = appender(&dir);
        let payload = vec![1u8; (SEGMENT_BYTES / 2) as usize];
        for batch in 1..=5 {
            log.append(batch, &payload).expect("append");
        }
        std::fs::remove_file(segment_path(&dir, 2)).expect("remove");
        let gap = replayed(&dir, 0).expect_err("gap");
        assert!(gap.contains("missing between"), "{gap}");
    }
}
