//! The one integration-test binary of the `engram` crate: every test drives the real binary
//! (a real HTTP server on a free port, a temp data dir, the real MiniLM model fetched by
//! `scripts/fetch-model.sh`) the way a user would.

#[macro_use]
mod helpers;

mod api_memories;
mod auth;
mod backup;
mod bad_input;
mod browser;
mod cli;
mod context;
mod conversations;
mod crash;
mod dedup;
mod docs;
mod erase;
pub(crate) mod extraction;
pub(crate) mod mcp;
mod message_search;
mod migrate;
mod outage;
mod postgres;
mod proxy;
mod reembed;
mod relevance;
mod state;
mod summaries;
mod telemetry;
mod tenancy;
mod time;
mod trust;
mod ui;
