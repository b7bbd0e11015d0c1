//! PostgreSQL's and the pool's errors by meaning (`StoreError`), with the server's own words.

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::store::model::StoreError;

/// A PostgreSQL error by meaning, with the server's own message: refused credentials
/// (SQLSTATE class 28, or a password the server asks for and we lack) are `Refused`; a
/// serialization failure or a deadlock (40001, 40P01: nothing committed) is `Contended`, run
/// again; a lost or refused connection, a timeout, a server shutting down or out of
/// resources, or a standby that takes no writes is `Io` (503, retry); anything else is a fault.
pub(super) fn pg_error(e: tokio_postgres::Error) -> StoreError {
    let text = describe(&e);
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection failed, closed or timed out, or never got as far as
        // a server's answer. tokio-postgres's kinds are private; these two are its top lines
        // for a password it was asked for and lacks and for an authentication it could not do.
        let top = e.to_string();
        if top == "invalid configuration" || top == "authentication error" {
            return StoreError::Refused(text);
        }
        return StoreError::Io(text);
    };
    let class = &code.code()[..2];
    if class == "28" {
        return StoreError::Refused(text);
    }
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        return StoreError::Contended(text);
    }
    let transient = matches!(class, "08" | "40" | "53" | "57" | "58")
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
        || *code == SqlState::LOCK_NOT_AVAILABLE;
    if transient {
        StoreError::Io(text)
    } else {
        StoreError::Corrupt(text)
    }
}

/// What went wrong, as the server said it (severity, SQLSTATE, message, detail, hint) or with
/// every cause of a client-side error: tokio-postgres's own `Display` stops at "db error".
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!(
            "PostgreSQL {} {}: {}",
            db.severity(),
            db.code().code(),
            db.message()
        );
        for (label, part) in [("detail", db.detail()), ("hint", db.hint())] {
            if let Some(part) = part {
                text.push_str(&format!(" ({label}: {part})"));
            }
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

pub(super) fn pool_error(e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(e) => pg_error(e),
        PoolError::Closed => StoreError::Closed,
        e => StoreError::Io(format!("no database connection: {e}")),
    }
}
