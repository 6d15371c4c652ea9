//! The three embedder implementations.
//!
//! - [`builtin`]: static table compiled into the binary (default, offline, very fast).
//! - [`bert`]: a local BERT sentence-transformers model run with candle on the CPU.
//! - [`openai`]: an OpenAI-compatible `/v1/embeddings` HTTP endpoint.

pub mod bert;
pub mod builtin;
pub mod openai;
