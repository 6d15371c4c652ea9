//! Integration tests of engram-providers, in one binary to save link time.
//!
//! - `bert`: the candle MiniLM against golden sentence-transformers vectors, folder errors.
//! - `onnx`: the same model on ONNX Runtime: the same vectors and id, the request lane, a graph
//!   of other weights refused.
//! - `builtin`: the compiled-in static embedder (contract, quality sanity, speed floor).
//! - `openai`: the HTTP embedder against a real local server speaking the OpenAI protocol.
//! - `config`: `build_embedder` and `EmbedderConfig`.
//! - `llm`: the OpenAI and Anthropic LLM clients against `testkit::ScriptedLlm`.

mod bert;
mod builtin;
mod config;
mod llm;
mod onnx;
mod openai;

/// Cosine of two vectors (not assumed normalised).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// Assert `v` has unit length.
pub fn assert_unit(v: &[f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "vector is not unit length: norm {norm}");
}
