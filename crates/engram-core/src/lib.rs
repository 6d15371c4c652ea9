//! engram-core: the engine of engram.
//!
//! Adapters (REST, CLI, MCP) call [`engine::Engine`]; the engine talks to the world only
//! through three traits: [`store::Store`] (persistence), [`embed::Embedder`] (vectors) and
//! [`llm::Llm`]. Nothing here knows HTTP, SQL or clap.
//!
//! Layers, each importing only those below it: `error`, `model` → `store`, `embed`, `llm` →
//! `metrics`, `priority` → `services` (what operations and jobs work with) → `pipeline` (the job
//! handlers), `retrieval`, `dedup`, `when` (time in words), `speaker` (who said a message), `words` (function words) →
//! `jobs` (the worker loop) and `engine` (the request path).

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
pub mod priority;
pub mod retrieval;
pub mod services;
pub mod speaker;
pub mod store;
pub mod when;
pub mod words;
