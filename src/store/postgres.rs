//! The PostgreSQL backend, for a store that runs on more than one box: a connection pool, the
//! schema and its migrations (under an advisory lock, so instances starting together apply
//! each once), the reads, and the engine that runs each batch of the write front (one per
//! instance, `store/write.rs`) as one transaction.
//! Invariant: ids of each kind come from one counter row, locked by every transaction that
//! gives them, so they are unique and increase in commit order across instances and a
//! failover; a pet, its revision, its idempotency record, its orders and the inventory's
//! counters change in one transaction. No PostgreSQL type leaves this module and its children.
//!
//! Its parts: `handle.rs` (the pool, the open, the reads of pets and events), `sales.rs` (the
//! reads of orders, categories and the inventory), `batch.rs` (the engine under the write
//! front and its lock order), `txn.rs` (the transaction interface the rules run against, the
//! counters and the inventory a batch moves), `schema.rs` (migrations), `webhooks.rs` (webhook endpoints' state and leases), `sessions.rs` (console sessions), `rows.rs` (values in rows), `errors.rs` (errors by
//! meaning), `connect` (the URL and TLS), `pool.rs`, `copy.rs`.

mod batch;
pub mod connect;
pub(super) mod copy;
mod errors;
mod handle;
mod pool;
mod rows;
mod sales;
mod schema;
mod sessions;
mod txn;
mod webhooks;

pub(super) use handle::{ANSWER_WITHIN, PgStore};
pub use webhooks::states_in_database;
