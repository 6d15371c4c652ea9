//! The API layer every front door goes through: REST ([`crate::http`]), MCP
//! ([`crate::mcp`]) and the command line ([`crate::cli`]) — and the web UI and the proxy to
//! come. It owns the wire shapes ([`dto`]: what clients send and receive, converted from and
//! into engine types here, so no engine type is serialized onto the wire by a transport;
//! [`results`]: search results, expansions and synthesized answers) and
//! the one error format ([`error`]), and who is calling ([`auth`]: key → principal). Transports own only what is theirs: routing, extractors,
//! sessions.
//!
//! **Architecture invariant:** `api` imports no transport (`http`, `mcp`, `cli`); the
//! transports import `api`, and `mcp` imports nothing of `http`.

pub mod auth;
pub mod dto;
pub mod error;
pub mod proxy;
pub mod results;
pub mod state;
