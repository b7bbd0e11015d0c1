//! Integration tests: the real `petstore` binary, over real TLS on an ephemeral port, with a
//! temp redb file. One module per area; `support` holds the harness, and `pg_cluster`
//! (`tests/support/`, shared with the store suite and the load bench) runs throwaway
//! PostgreSQL clusters.

mod acme;
mod auth;
mod backup;
mod categories;
mod cli;
mod connection_fuzz;
mod console;
mod console_server;
mod copy;
mod crash;
mod create;
mod damaged;
mod errors;
mod events;
mod faults;
mod get;
mod haproxy;
mod health;
mod idempotency;
mod inventory;
mod keys;
mod lifecycle;
mod limits;
mod list;
mod logs;
mod metrics;
mod openapi;
// The server's one list of operations, which the OpenAPI tests hold the document to.
#[allow(dead_code)]
#[path = "../../src/operations.rs"]
mod operations;
mod orders;
mod paging;
mod patch;
#[path = "../../tests/support/pg_cluster.rs"]
mod pg_cluster;
mod pg_cluster_harness;
mod postgres;
mod rate_limits;
mod readme;
mod reload;
mod search;
mod support;
mod tls;
mod webhooks;
mod webhooks_cli;
