//! engram-providers: the embedders behind [`engram_core::embed::Embedder`].
//!
//! Three implementations, chosen with an [`EmbedderConfig`] and built by [`build_embedder`]:
//!
//! - [`EmbedderConfig::Builtin`] → [`BuiltinEmbedder`]: the default. A static token-embedding
//!   table distilled from all-MiniLM-L6-v2 (model2vec-style), compiled into the binary with
//!   the MiniLM tokenizer. No file, no download, no network; hundreds of thousands of short
//!   texts per second on one core. See `README.md` of this crate for how the table is made
//!   and how it compares with MiniLM on LoCoMo.
//! - [`EmbedderConfig::Local`] → [`BertEmbedder`]: a BERT-family sentence-transformers model
//!   (e.g. all-MiniLM-L6-v2) loaded from a folder and run on the CPU with candle. Matches
//!   Python sentence-transformers (cosine > 0.999, tested against golden vectors).
//! - [`EmbedderConfig::OpenAi`] → [`OpenAiEmbedder`]: any OpenAI-compatible
//!   `POST /v1/embeddings` endpoint (OpenAI, Ollama, vLLM, TEI, …), with timeouts, retries
//!   and errors classified by [`engram_core::FaultSource`].
//!
//! Every embedder returns L2-normalised vectors and a stable `model_id()` that the store
//! persists next to each vector.
//!
//! [`testing`] holds helpers other crates' tests reuse (where to find the MiniLM folder).

pub mod embed;
pub mod testing;
pub mod upstream;

use std::path::PathBuf;
use std::sync::Arc;

use engram_core::embed::{EmbedError, Embedder};

pub use embed::bert::{BertEmbedder, BertOptions, LocalRuntime};
pub use embed::builtin::{BUILTIN_MODEL_ID, BuiltinEmbedder, StaticTable};
pub use embed::openai::{OpenAiEmbedder, OpenAiSettings};

/// Which embedder to run. Built into an [`Embedder`] by [`build_embedder`].
#[derive(Clone, PartialEq, Eq)]
pub enum EmbedderConfig {
    /// The static model compiled into the binary (`builtin:minilm-static-v1`).
    Builtin,
    /// `--embedder local:<dir>`: the folder's model at the fastest runtime that keeps
    /// retrieval quality, chosen per store by [`EmbedderConfig::for_store`]: the int8 graph
    /// for a new store (when the folder has it), and whatever vectors a store already holds.
    LocalAuto { dir: PathBuf },
    /// A sentence-transformers BERT folder (`model.safetensors`, `tokenizer.json`,
    /// `config.json`), run on the CPU with the exact weights (`--embedder local-exact:<dir>`):
    /// ONNX Runtime when the folder has the graph, else candle.
    Local { dir: PathBuf },
    /// The same folder's int8 graph (`model.int8.onnx`) on ONNX Runtime: about twice as
    /// fast in the background, other vectors (its own model id).
    LocalInt8 { dir: PathBuf },
    /// An OpenAI-compatible embeddings endpoint.
    OpenAi {
        /// e.g. `https://api.openai.com` or `http://127.0.0.1:11434/v1` (a trailing `/v1` is
        /// accepted and not doubled).
        base_url: String,
        /// The `model` field of the request, e.g. `text-embedding-3-small`.
        model: String,
        /// Sent as `Authorization: Bearer <key>` when present. Never printed by `Debug`.
        api_key: Option<String>,
        /// When set, sent as the `dimensions` request field and checked on every answer.
        /// When `None`, the model's native size is learned by one probe request at build.
        dims: Option<usize>,
    },
}

impl std::fmt::Debug for EmbedderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EmbedderConfig::Builtin => f.write_str("Builtin"),
            EmbedderConfig::LocalAuto { dir } => {
                f.debug_struct("LocalAuto").field("dir", dir).finish()
            }
            EmbedderConfig::Local { dir } => f.debug_struct("Local").field("dir", dir).finish(),
            EmbedderConfig::LocalInt8 { dir } => {
                f.debug_struct("LocalInt8").field("dir", dir).finish()
            }
            EmbedderConfig::OpenAi { base_url, model, api_key, dims } => f
                .debug_struct("OpenAi")
                .field("base_url", base_url)
                .field("model", model)
                .field("api_key", &api_key.as_ref().map(|_| "<redacted>"))
                .field("dims", dims)
                .finish(),
        }
    }
}

impl EmbedderConfig {
    /// The configuration to run on a store whose vectors were made by `recorded` (its
    /// embedding space's model id; `None`: a new store). Only `local:` depends on the store:
    ///
    /// - a store of the exact model's vectors (a `local:` id without `-int8`) keeps the exact
    ///   model, so an existing deployment never changes vectors under its data;
    /// - any other store (new, already int8, or of another model on its way to `engram
    ///   reembed`) gets the int8 graph when the folder has it, ONNX Runtime is found and the
    ///   CPU is one where int8 was measured to keep quality ([`int8_keeps_quality`]): it
    ///   embeds about twice as fast and keeps LoCoMo recall (benches/README.md, "Faster
    ///   inference"); otherwise the exact model.
    pub fn for_store(&self, recorded: Option<&str>) -> EmbedderConfig {
        let EmbedderConfig::LocalAuto { dir } = self else { return self.clone() };
        let exact_store =
            recorded.is_some_and(|id| id.starts_with("local:") && !id.ends_with("-int8"));
        if !exact_store && int8_available(dir) && int8_keeps_quality() {
            EmbedderConfig::LocalInt8 { dir: dir.clone() }
        } else {
            EmbedderConfig::Local { dir: dir.clone() }
        }
    }
}

/// Whether this CPU multiplies int8 with VNNI (x86-64 AVX-512 VNNI or AVX-VNNI), where the
/// int8 graph was measured to keep LoCoMo recall. Without VNNI, ONNX Runtime's x86 kernels
/// can saturate on signed int8 weights, so `local:` keeps the exact model there (`local-int8:`
/// still asks for the graph by name).
pub fn int8_keeps_quality() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512vnni")
            || std::arch::is_x86_feature_detected!("avxvnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether `dir` has the int8 graph and ONNX Runtime can be found to run it.
pub fn int8_available(dir: &std::path::Path) -> bool {
    dir.join(embed::onnx::INT8_FILE).is_file() && embed::onnx::find_library(dir).is_some()
}

/// Build the embedder a configuration names.
///
/// - `Builtin` parses the compiled-in table (a few ms; the parse is shared by all instances).
/// - `LocalAuto` builds what it picks for a new store ([`EmbedderConfig::for_store`]).
/// - `Local` reads the model folder (~90 MB for MiniLM); errors are `User` faults naming the
///   missing file or the bad config.
/// - `OpenAi` with `dims: None` **blocks** on one probe request (`input: ["dimension probe"]`,
///   30 s timeout, retried like any call) to learn the vector size, so that `dims()` is right
///   from the start. The probe runs on its own thread with its own small runtime, so this is
///   safe to call from inside a tokio runtime (it blocks the calling thread meanwhile). Async
///   callers that prefer not to block can use [`OpenAiEmbedder::connect`] instead.
pub fn build_embedder(cfg: &EmbedderConfig) -> Result<Arc<dyn Embedder>, EmbedError> {
    match cfg {
        EmbedderConfig::Builtin => Ok(Arc::new(BuiltinEmbedder::new()?)),
        EmbedderConfig::LocalAuto { .. } => build_embedder(&cfg.for_store(None)),
        EmbedderConfig::Local { dir } => Ok(Arc::new(BertEmbedder::load(dir)?)),
        EmbedderConfig::LocalInt8 { dir } => {
            let int8 = BertOptions { runtime: LocalRuntime::OnnxInt8, ..Default::default() };
            Ok(Arc::new(BertEmbedder::load_with(dir, int8)?))
        }
        EmbedderConfig::OpenAi { base_url, model, api_key, dims } => {
            let settings = OpenAiSettings::new(base_url, model, api_key.clone(), *dims);
            Ok(Arc::new(OpenAiEmbedder::connect_blocking(settings)?))
        }
    }
}

pub mod llm;
pub use llm::{LlmConfig, build_llm};
