//! Integration tests: the real `petstore` binary, over real TLS on an ephemeral port, with a
//! temp redb file. One module per area; `support` holds the harness.

mod auth;
mod crash;
mod create;
mod errors;
mod get;
mod health;
mod idempotency;
mod lifecycle;
mod limits;
mod list;
mod logs;
mod openapi;
mod paging;
mod patch;
mod reload;
mod support;
mod tls;
