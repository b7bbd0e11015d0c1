//! How the store's values sit in PostgreSQL rows and columns: an idempotency record, a
//! revision, a status code. Shared by the reads, the batches and the copy.

use crate::pet::PetStatus;
use crate::store::model::{Record, StoreError};

/// An idempotency record, by its scope.
pub(super) const READ_RECORD: &str =
    "SELECT fingerprint, expires_at, pet_id FROM idempotency WHERE scope = $1";

/// An idempotency row (`READ_RECORD`) as the record it is.
pub(super) fn record_of(row: &tokio_postgres::Row) -> Result<Record, StoreError> {
    let fingerprint = row.get::<_, &[u8]>(0).try_into().map_err(|_| {
        StoreError::Corrupt("an idempotency record's fingerprint is not 16 bytes".into())
    })?;
    Ok(Record {
        fingerprint,
        expires_at: row.get::<_, i64>(1).unsigned_abs(),
        id: row.get(2),
    })
}

pub(super) fn revision(stored: i64) -> u64 {
    stored.unsigned_abs()
}

/// The status as the `status` column keeps it: the same stable codes as redb's index.
pub(super) fn status_code(status: Option<PetStatus>) -> Option<i16> {
    status.map(|status| i16::from(status.to_code()))
}
