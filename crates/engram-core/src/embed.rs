//! The embedder contract.
//!
//! An [`Embedder`] turns texts into L2-normalised vectors. Every vector the store keeps is
//! tagged with the [`Embedder::model_id`] that made it, and a store refuses to mix vectors of
//! different dimensions (see `Store`), so switching model is an explicit re-embed, never a
//! silent mix of spaces.

use async_trait::async_trait;

pub use crate::error::EmbedError;

/// Turns texts into unit-length vectors of a fixed dimension.
///
/// Contract:
/// - `embed(texts)` returns exactly `texts.len()` vectors, in order, each of length `dims()`,
///   each L2-normalised (so a dot product is the cosine similarity).
/// - `model_id()` is stable across restarts for the same weights; it is persisted next to
///   every vector. **Serialized in the DB: changes must be backward compatible.**
/// - Implementations may batch internally; CPU-heavy ones must not block the async runtime.
#[async_trait]
pub trait Embedder: Send + Sync {
    /// Stable identity of the model, e.g. `builtin:minilm-static-v1`.
    fn model_id(&self) -> &str;
    /// Dimension of every vector this embedder returns.
    fn dims(&self) -> usize;
    /// Embed a batch of texts for the request path (a search's, context's or remember's
    /// own embedding).
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Embed a batch of texts for background work (message vectors, extraction, compaction,
    /// re-embedding). An embedder whose resource serves both (the local model's CPU) runs
    /// such a batch where it never delays an [`Embedder::embed`] call (the local model: on
    /// threads of the lowest scheduling priority); the others embed as for a request.
    async fn embed_background(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed(texts).await
    }
    /// How this model's cosine similarities read as semantic support (see
    /// [`SimilarityScale`]). Models differ a lot: unrelated texts reach 0.2 with one and 0.5
    /// with another.
    fn similarity_scale(&self) -> SimilarityScale {
        SimilarityScale::DEFAULT
    }
    /// The [`SimilarityScale`] a search for `query` reads its cosines on: the model's own,
    /// unless the model can tell it reads this query poorly (the built-in embedder: a query
    /// in a language its English vocabulary does not hold, whose vector then matches any
    /// text of that language about as well as the right one).
    fn query_scale(&self, query: &str) -> SimilarityScale {
        let _ = query;
        self.similarity_scale()
    }
    /// Whether a transcript message's vector also reads the message alone
    /// (`pipeline::messages`): the sum of the vectors of the message after its context and
    /// of the message alone, normalised. A contextual encoder (the default) reads a document
    /// as a whole, so the vector of a short message after two longer ones leans towards
    /// their topic; a static model sums its tokens' vectors, the message's own at full
    /// weight, and keeps the document alone (`false`).
    fn adds_message_alone(&self) -> bool {
        true
    }
}

/// Where a model's cosine similarity stops being noise and where it is certain: a cosine at
/// or below `floor` is what a query reaches against texts on other topics (the best of a
/// few thousand of them), one at or above `full` is a close paraphrase. In between, semantic
/// support rises linearly from 0 to 1 ([`SimilarityScale::support`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimilarityScale {
    pub floor: f32,
    pub full: f32,
}

impl SimilarityScale {
    /// For a model engram has not measured (an OpenAI-compatible endpoint): typical of
    /// sentence-embedding models trained with a contrastive loss.
    pub const DEFAULT: SimilarityScale = SimilarityScale { floor: 0.35, full: 0.80 };

    /// The scale for a query the model reads with `trust` (0 to 1): the floor rises towards
    /// `full` as trust falls, so at 0 only a near-identical text has semantic support.
    pub fn trusting(self, trust: f64) -> SimilarityScale {
        let distrust = (1.0 - trust.clamp(0.0, 1.0)) as f32;
        SimilarityScale { floor: self.floor + (self.full - self.floor) * distrust, full: self.full }
    }

    /// Semantic support of a cosine similarity, 0 to 1.
    pub fn support(&self, cosine: f32) -> f64 {
        let span = f64::from(self.full - self.floor).max(1e-6);
        (f64::from(cosine - self.floor) / span).clamp(0.0, 1.0)
    }
}

/// Scale `v` to unit length in place (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

/// Dot product; equals the cosine similarity for unit vectors.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
