//! engram-core: the engine of engram.
//!
//! Adapters (REST, CLI, MCP) call [`engine::Engine`]; the engine talks to the world only
//! through three traits: [`store::Store`] (persistence), [`embed::Embedder`] (vectors) and,
//! later, the LLM. Nothing here knows HTTP, SQL or clap.

pub mod embed;
pub mod error;

pub use error::{Error, ErrorCode, FaultSource, Result};
pub mod engine;
pub mod model;
pub mod retrieval;
pub mod store;
pub mod llm;
