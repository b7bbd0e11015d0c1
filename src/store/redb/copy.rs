//! Copying a redb store out and in, for `petstore copy`. The export is one read transaction,
//! streamed in chunks from a blocking thread. The import writes each chunk in its own large
//! transaction that is not made durable (redb's `Durability::None`) and makes everything
//! durable with the last one, which sets the id counter: a crash before it leaves the file as
//! empty as it was, and `abort` empties it again after a failure. Each record comes with its
//! index entries as `redb/entries.rs` declares them. Only this module turns
//! redb's idempotency record into the store's `IdempotencyRecord` and back.

use std::sync::Arc;

use redb::TableHandle;
use redb::{
    Database, Durability, ReadTransaction, ReadableDatabase, ReadableTable, ReadableTableMetadata,
};
use tokio::sync::{mpsc, oneshot};

use super::handle::{RedbStore, Shared};
use super::idempotency::{self, Index};
use super::indexes::{self, Open};
use super::open::count_inventory;
use super::tables::{
    META, META_INVENTORY, META_NEXT_ID, PETS, RECORDS, REVISIONS, declared_names, meta_value,
};
use crate::category::Category;
use crate::clock::unix_now;
use crate::pet::Pet;
use crate::store::model::{Chunk, Exporting, IdempotencyRecord, Rows, StoreError, StoredPet};
use crate::store::ops::COUNTERS;
use crate::store::ops::each_resource;
use crate::store::resource::Resource;
use crate::store::resource::{Counter, ForEach, NextIds, WithRecords};
use crate::subject::Kind;

impl RedbStore {
    /// Starts streaming the store into `sender` from one read transaction; returns its id
    /// counter. See `Store::export`.
    pub(in crate::store) async fn export(&self, to: Exporting) -> Result<NextIds, StoreError> {
        let (chunk, now, sender) = (to.chunk, to.now, to.into);
        let shared = Arc::clone(&self.shared);
        let (counter, next_id) = oneshot::channel();
        // The guard is held to the end of the export, so a reopen waits for it.
        tokio::task::spawn_blocking(move || {
            let db = shared.db();
            let Some(db) = db.as_ref() else {
                let _ = counter.send(Err(StoreError::Reopening));
                return;
            };
            let begun = db
                .begin_read()
                .map_err(StoreError::storage)
                .and_then(|txn| Ok((next_ids_in(&txn)?, txn)));
            let txn = match begun {
                Ok((next_ids, txn)) => {
                    let _ = counter.send(Ok(next_ids));
                    txn
                }
                Err(e) => {
                    let _ = counter.send(Err(e));
                    return;
                }
            };
            if let Err(e) = stream(&txn, chunk, now, &sender) {
                let _ = sender.blocking_send(Err(e));
            }
        });
        next_id.await.map_err(|_| worker_gone())?
    }

    /// Starts a bulk write, after checking that the store is empty. See `Store::import`.
    pub(in crate::store) async fn import(&self) -> Result<RedbImport, StoreError> {
        let shared = Arc::clone(&self.shared);
        on_blocking(&shared, |db| {
            let txn = db.begin_read().map_err(StoreError::storage)?;
            let pets = txn
                .open_table(PETS)
                .and_then(|pets| Ok(pets.len()?))
                .map_err(StoreError::storage)?;
            let records = txn
                .open_table(RECORDS)
                .and_then(|records| Ok(records.len()?))
                .map_err(StoreError::storage)?;
            let next_id = next_id_in(&txn)?;
            let categories = txn
                .open_table(indexes::records::<Category>())
                .and_then(|categories| Ok(categories.len()?))
                .map_err(StoreError::storage)?;
            if pets > 0 || records > 0 || next_id != 1 || categories > 0 {
                return Err(StoreError::NotEmpty {
                    pets,
                    records,
                    next_id,
                });
            }
            Ok(())
        })
        .await?;
        Ok(RedbImport { shared })
    }
}

/// A bulk write in progress; see `Import`.
pub(in crate::store) struct RedbImport {
    shared: Arc<Shared>,
}

impl RedbImport {
    /// Writes one chunk in one transaction that is not yet durable.
    pub(in crate::store) async fn write(&mut self, chunk: Chunk) -> Result<(), StoreError> {
        self.transaction(Durability::None, move |txn| match chunk {
            Chunk::Pets(pets) => {
                let mut open = Open::new(txn);
                let mut revisions = txn.open_table(REVISIONS).map_err(StoreError::storage)?;
                for stored in &pets {
                    let (id, json) = (stored.id, stored.json.as_ref());
                    open.put(None, &Pet::decode(id, json)?, json)?;
                    // A pet not listed is at revision 1: see `REVISIONS`.
                    if stored.revision != 1 {
                        revisions
                            .insert(id, stored.revision)
                            .map_err(StoreError::storage)?;
                    }
                }
                Ok(())
            }
            Chunk::Records(records) => {
                let mut table = txn.open_table(RECORDS).map_err(StoreError::storage)?;
                for record in &records {
                    let value = idempotency::joined(&record.scope, &record.fingerprint);
                    table
                        .insert((record.expires_at, record.pet_id), value)
                        .map_err(StoreError::storage)?;
                }
                Ok(())
            }
            Chunk::Rows(rows) => {
                /// Each record into its table and its indexes.
                struct Put<'o, 't>(&'o mut Open<'t>);
                impl WithRecords for Put<'_, '_> {
                    fn with<R: Resource>(
                        &mut self,
                        records: Vec<R>,
                        stored: &Rows,
                    ) -> Result<(), StoreError> {
                        for (record, (_, stored)) in records.iter().zip(&stored.records) {
                            self.0.put(None, record, stored)?;
                        }
                        Ok(())
                    }
                }
                rows.each(&mut Put(&mut Open::new(txn)))
            }
        })
        .await
    }

    /// Sets the id counter in a durable transaction, which makes every chunk before it durable
    /// too; then the in-memory index of idempotency records takes the imported ones.
    pub(in crate::store) async fn commit(self, next: NextIds) -> Result<(), StoreError> {
        self.transaction(Durability::Immediate, move |txn| {
            {
                let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
                for counter in COUNTERS {
                    let next = next.of(counter);
                    meta.insert(counter.key(), next)
                        .map_err(StoreError::storage)?;
                }
            }
            // The chunks wrote every record's entries; the counts are made once, of all pets.
            count_inventory(txn)
        })
        .await?;
        let shared = Arc::clone(&self.shared);
        let index = on_blocking(&self.shared, |db| {
            let txn = db.begin_read().map_err(StoreError::storage)?;
            let records = txn.open_table(RECORDS).map_err(StoreError::storage)?;
            Index::load(&records, unix_now())
        })
        .await?;
        shared.index.replace(index);
        Ok(())
    }

    /// Empties every table the import wrote and puts the counter back to 1, durably.
    pub(in crate::store) async fn abort(self) -> Result<(), StoreError> {
        self.transaction(Durability::Immediate, |txn| {
            // What the import wrote, deleted and made anew (empty): by name, whatever the
            // table's types.
            let written = declared_names()
                .into_iter()
                .chain([REVISIONS.name(), RECORDS.name()]);
            for name in written {
                let table: redb::TableDefinition<'_, u64, u64> = redb::TableDefinition::new(name);
                txn.delete_table(table).map_err(StoreError::storage)?;
            }
            super::open::create_declared(txn)?;
            txn.open_table(REVISIONS).map_err(StoreError::storage)?;
            idempotency::create_tables(txn)?;
            let mut meta = txn.open_table(META).map_err(StoreError::storage)?;
            meta.insert(META_NEXT_ID, 1).map_err(StoreError::storage)?;
            let others = COUNTERS.into_iter().map(Counter::key);
            for key in others
                .filter(|key| *key != META_NEXT_ID)
                .chain(META_INVENTORY)
            {
                meta.remove(key).map_err(StoreError::storage)?;
            }
            Ok(())
        })
        .await
    }

    /// Runs `work` in one write transaction on a blocking thread and commits it with
    /// `durability`.
    async fn transaction(
        &self,
        durability: Durability,
        work: impl FnOnce(&redb::WriteTransaction) -> Result<(), StoreError> + Send + 'static,
    ) -> Result<(), StoreError> {
        let shared = Arc::clone(&self.shared);
        on_blocking(&self.shared, move |db| {
            let mut txn = db.begin_write().map_err(StoreError::storage)?;
            txn.set_durability(durability)
                .map_err(StoreError::storage)?;
            work(&txn)?;
            txn.commit().map_err(StoreError::storage)?;
            shared.snapshots.committed();
            Ok(())
        })
        .await
    }
}

/// Runs `work` on the open database on a blocking thread.
async fn on_blocking<T: Send + 'static>(
    shared: &Arc<Shared>,
    work: impl FnOnce(&Database) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let shared = Arc::clone(shared);
    tokio::task::spawn_blocking(move || {
        let db = shared.db();
        work(db.as_ref().ok_or(StoreError::Reopening)?)
    })
    .await
    .map_err(|_| worker_gone())?
}

fn worker_gone() -> StoreError {
    StoreError::Corrupt("the copy's database thread ended without an answer".into())
}

/// Every id counter, as `txn` sees them (1 where none was given yet).
fn next_ids_in(txn: &ReadTransaction) -> Result<NextIds, StoreError> {
    let meta = txn.open_table(META).map_err(StoreError::storage)?;
    let mut next = NextIds::untouched();
    for counter in COUNTERS {
        next.set(counter, meta_value(&meta, counter.key())?.max(1));
    }
    Ok(next)
}

fn next_id_in(txn: &ReadTransaction) -> Result<u64, StoreError> {
    let meta = txn.open_table(META).map_err(StoreError::storage)?;
    Ok(meta
        .get(META_NEXT_ID)
        .map_err(StoreError::storage)?
        .map_or(1, |v| v.value()))
}

/// Sends every pet, then every record live at `now`, in chunks; returns early, without an
/// error, when the receiver has gone.
fn stream(
    txn: &ReadTransaction,
    chunk: usize,
    now: u64,
    sender: &mpsc::Sender<Result<Chunk, StoreError>>,
) -> Result<(), StoreError> {
    let pets = txn.open_table(PETS).map_err(StoreError::storage)?;
    let revisions = txn.open_table(REVISIONS).map_err(StoreError::storage)?;
    // Both tables are in id order, so one pass over each joins them.
    let mut changed = revisions.iter().map_err(StoreError::storage)?;
    let mut next_changed = || -> Result<Option<(i64, u64)>, StoreError> {
        changed
            .next()
            .transpose()
            .map_err(StoreError::storage)
            .map(|entry| entry.map(|(id, revision)| (id.value(), revision.value())))
    };
    let mut revised = next_changed()?;
    let mut batch = Vec::with_capacity(chunk);
    for entry in pets.iter().map_err(StoreError::storage)? {
        let (id, json) = entry.map_err(StoreError::storage)?;
        let id = id.value();
        while let Some((changed_id, _)) = revised
            && changed_id < id
        {
            revised = next_changed()?;
        }
        let revision = match revised {
            Some((changed_id, revision)) if changed_id == id => revision,
            _ => 1,
        };
        batch.push(StoredPet {
            id,
            revision,
            json: bytes::Bytes::copy_from_slice(json.value()),
        });
        if batch.len() == chunk {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(chunk));
            if sender.blocking_send(Ok(Chunk::Pets(full))).is_err() {
                return Ok(());
            }
        }
    }
    if !batch.is_empty() && sender.blocking_send(Ok(Chunk::Pets(batch))).is_err() {
        return Ok(());
    }
    let records = txn.open_table(RECORDS).map_err(StoreError::storage)?;
    let mut batch = Vec::new();
    // The live records: those expiring after `now`, in the table's (expiry, id) order.
    let live = records
        .range((now.saturating_add(1), i64::MIN)..)
        .map_err(StoreError::storage)?;
    for entry in live {
        let (key, value) = entry.map_err(StoreError::storage)?;
        let ((expires_at, pet_id), value) = (key.value(), value.value());
        let (scope, fingerprint) = idempotency::split(&value);
        batch.push(IdempotencyRecord {
            scope,
            fingerprint,
            expires_at,
            pet_id,
        });
        if batch.len() == chunk {
            let full = std::mem::take(&mut batch);
            if sender.blocking_send(Ok(Chunk::Records(full))).is_err() {
                return Ok(());
            }
        }
    }
    if !batch.is_empty() && sender.blocking_send(Ok(Chunk::Records(batch))).is_err() {
        return Ok(());
    }
    /// Every other resource's records, a resource at a time.
    struct Others<'a, 't> {
        txn: &'t ReadTransaction,
        chunk: usize,
        sender: &'a mpsc::Sender<Result<Chunk, StoreError>>,
        gone: bool,
    }
    impl ForEach for Others<'_, '_> {
        fn visit<R: Resource>(&mut self) -> Result<(), StoreError> {
            if R::KIND != Kind::Pet && !self.gone {
                self.gone = !stream_records::<R>(self.txn, self.chunk, self.sender)?;
            }
            Ok(())
        }
    }
    let mut others = Others {
        txn,
        chunk,
        sender,
        gone: false,
    };
    each_resource(&mut others)
}

/// Sends every record of `R` in chunks, as stored; `false` when the receiver has gone.
fn stream_records<R: Resource>(
    txn: &ReadTransaction,
    chunk: usize,
    sender: &mpsc::Sender<Result<Chunk, StoreError>>,
) -> Result<bool, StoreError> {
    let table = txn.open_table(indexes::records::<R>());
    let table = table.map_err(StoreError::storage)?;
    let wrap = |records| {
        Ok(Chunk::Rows(Rows {
            kind: R::KIND,
            records,
        }))
    };
    let mut batch = Vec::new();
    for row in table.iter().map_err(StoreError::storage)? {
        let (id, stored) = row.map_err(StoreError::storage)?;
        batch.push((id.value(), stored.value().to_vec()));
        if batch.len() == chunk
            && sender
                .blocking_send(wrap(std::mem::take(&mut batch)))
                .is_err()
        {
            return Ok(false);
        }
    }
    Ok(batch.is_empty() || sender.blocking_send(wrap(batch)).is_ok())
}
