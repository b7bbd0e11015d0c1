//! The queue of writes every backend takes them from: `Write` (what to do and whom to answer),
//! `Pending` (a caller and its outcome), and `gather`, which takes every write queued while
//! the last commit ran into the next batch (group commit). The backends run a batch in one
//! transaction; nothing here knows an engine. Invariant: each caller is answered exactly once,
//! after its batch has committed or failed.

use tokio::sync::{mpsc, oneshot};

use super::{Created, IdempotencyKey, Precondition, StoreError, StoredPet};
use crate::pet::{NewPet, PetId, PetPatch};

/// How many queued writes one transaction takes by default; bounds the latency of a batch.
pub const DEFAULT_MAX_WRITE_BATCH: usize = 1024;

/// What the writer takes from its queue.
pub(crate) enum Command {
    Write(Write),
    Close(oneshot::Sender<()>),
}

/// A key with the expiry its record gets if the create goes ahead.
pub(crate) struct Keyed {
    pub(crate) key: IdempotencyKey,
    pub(crate) expires_at: u64,
}

/// A write waiting for its transaction: what to do and whom to answer.
pub(crate) enum Write {
    Create(NewPet, Option<Keyed>, Pending<Created>),
    Patch(PetId, PetPatch, Precondition, Pending<StoredPet>),
    Delete(PetId, Precondition, Pending<()>),
    /// Remove records that expired by this Unix time; answers how many.
    Purge(u64, Pending<usize>),
}

/// A caller waiting for one write, and that write's outcome once the transaction has run it.
pub(crate) struct Pending<T> {
    reply: oneshot::Sender<Result<T, StoreError>>,
    pub(crate) outcome: Option<Result<T, StoreError>>,
}

impl<T> Pending<T> {
    pub(crate) fn new(reply: oneshot::Sender<Result<T, StoreError>>) -> Pending<T> {
        Pending {
            reply,
            outcome: None,
        }
    }

    /// Whether the caller stopped waiting for the answer.
    pub(crate) fn abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    /// Answers the caller: its outcome if the transaction committed, else the failure.
    pub(crate) fn answer(self, failure: Option<&StoreError>) {
        let result = match (failure, self.outcome) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(outcome)) => outcome,
            (None, None) => Err(StoreError::Corrupt("a write ran without an outcome".into())),
        };
        let _ = self.reply.send(result);
    }
}

impl Write {
    pub(crate) fn answer(self, failure: Option<&StoreError>) {
        match self {
            Write::Create(_, keyed, pending) => {
                // The claim ends before the answer leaves: a client that got its 201 and
                // retries at once must get the replay, not a 409.
                drop(keyed);
                pending.answer(failure);
            }
            Write::Patch(.., pending) => pending.answer(failure),
            Write::Delete(.., pending) => pending.answer(failure),
            Write::Purge(_, pending) => pending.answer(failure),
        }
    }

    /// Whether the caller of this write stopped waiting for it (its time ran out).
    pub(crate) fn abandoned(&self) -> bool {
        match self {
            Write::Create(.., pending) => pending.abandoned(),
            Write::Patch(.., pending) => pending.abandoned(),
            Write::Delete(.., pending) => pending.abandoned(),
            Write::Purge(_, pending) => pending.abandoned(),
        }
    }

    /// Whether this write, once run, changed anything that needs a commit.
    pub(crate) fn changed(&self) -> bool {
        match self {
            Write::Create(_, _, pending) => {
                matches!(&pending.outcome, Some(Ok(created)) if !created.replayed)
            }
            Write::Patch(.., pending) => matches!(pending.outcome, Some(Ok(_))),
            Write::Delete(.., pending) => matches!(pending.outcome, Some(Ok(()))),
            Write::Purge(_, pending) => matches!(pending.outcome, Some(Ok(n)) if n > 0),
        }
    }
}

/// Adds `first` and every write queued behind it (up to `max` in all) to `batch`. On a close,
/// the writes already queued behind it are taken too, since their callers are waiting, and the
/// queue is closed; returns the close's reply then.
pub(crate) fn gather(
    first: Command,
    queue: &mut mpsc::Receiver<Command>,
    batch: &mut Vec<Write>,
    max: usize,
) -> Option<oneshot::Sender<()>> {
    let mut next = Some(first);
    while let Some(command) = next.take() {
        match command {
            Command::Write(write) => batch.push(write),
            Command::Close(done) => {
                while let Ok(Command::Write(write)) = queue.try_recv() {
                    batch.push(write);
                }
                queue.close();
                return Some(done);
            }
        }
        if batch.len() < max {
            next = queue.try_recv().ok();
        }
    }
    None
}
