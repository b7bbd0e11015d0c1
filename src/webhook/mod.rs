//! Webhooks: durable readers of the event feed that POST each event, signed as the Standard
//! Webhooks specification says, to the endpoints an operator lists in a file. `endpoints`
//! owns that file's format (the server reads it at start and on reload), `command` the
//! `petstore webhooks` subcommand that edits it. Delivery lives beside them; the file never
//! holds delivery state, which is the store's.

pub mod command;
pub mod endpoints;
