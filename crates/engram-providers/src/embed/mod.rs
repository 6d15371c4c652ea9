//! The three embedder implementations.
//!
//! - [`builtin`]: static table compiled into the binary (default, offline, very fast).
//! - [`bert`]: a local BERT sentence-transformers model run on the CPU, with candle or, when
//!   the folder has an ONNX export and the library is found, ONNX Runtime ([`onnx`]).
//! - [`openai`]: an OpenAI-compatible `/v1/embeddings` HTTP endpoint.

pub mod bert;
pub mod builtin;
pub mod onnx;
pub mod openai;
