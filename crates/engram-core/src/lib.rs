//! engram-core: the engine of engram.
//!
//! Adapters (REST, CLI, MCP) call [`engine::Engine`]; the engine talks to the world only
//! through three traits: [`store::Store`] (persistence), [`embed::Embedder`] (vectors) and,
//! later, the LLM. Nothing here knows HTTP, SQL or clap.

pub mod dedup;
pub mod embed;
pub mod error;

pub use error::{Error, ErrorCode, FaultSource, Result};
pub mod engine;
pub mod jobs;
pub mod llm;
pub mod metrics;
pub mod model;
pub mod pipeline;
pub mod retrieval;
pub mod store;
