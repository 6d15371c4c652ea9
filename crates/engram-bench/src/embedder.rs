//! Which embedder a benchmark runs: the built-in static model or MiniLM (ONNX Runtime or
//! candle, CPU).

use std::sync::Arc;

use anyhow::Context;
use engram_core::embed::Embedder;
use engram_providers::EmbedderConfig;

/// `--embedder` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderChoice {
    /// The static table compiled into engram (`builtin:minilm-static-v1`).
    Builtin,
    /// all-MiniLM-L6-v2 from `$ENGRAM_MINILM_DIR` or `~/.cache/engram/all-MiniLM-L6-v2`
    /// (fetched by `scripts/fetch-model.sh`), exact, as `--embedder local-exact:` runs it
    /// (and `local:` on a store of its vectors): on ONNX Runtime when the folder has its
    /// export and library, else on candle.
    Minilm,
    /// The same model, always on candle (the "before" of issue 14's item 3).
    MinilmCandle,
    /// The same model's int8 graph on ONNX Runtime (other vectors, another model id): what
    /// `local:` runs on a new store on a CPU with VNNI.
    MinilmInt8,
}

impl EmbedderChoice {
    pub fn name(self) -> &'static str {
        match self {
            EmbedderChoice::Builtin => "builtin",
            EmbedderChoice::Minilm => "minilm",
            EmbedderChoice::MinilmCandle => "minilm-candle",
            EmbedderChoice::MinilmInt8 => "minilm-int8",
        }
    }

    /// Build the embedder (MiniLM: loads ~90 MB of weights).
    pub fn build(self) -> anyhow::Result<Arc<dyn Embedder>> {
        self.build_with(engram_providers::BertOptions::default())
    }

    /// [`Self::build`], MiniLM with these options (the runtime is this choice's).
    pub fn build_with(
        self,
        mut options: engram_providers::BertOptions,
    ) -> anyhow::Result<Arc<dyn Embedder>> {
        let cfg = match self {
            EmbedderChoice::Builtin => EmbedderConfig::Builtin,
            EmbedderChoice::Minilm | EmbedderChoice::MinilmCandle | EmbedderChoice::MinilmInt8 => {
                let dir = engram_providers::testing::minilm_dir_candidate();
                anyhow::ensure!(
                    dir.join("model.safetensors").is_file(),
                    "MiniLM not found in {}: run scripts/fetch-model.sh or set {}",
                    dir.display(),
                    engram_providers::testing::MINILM_DIR_ENV
                );
                match self {
                    EmbedderChoice::MinilmCandle => {
                        options.runtime = engram_providers::LocalRuntime::Candle;
                    }
                    EmbedderChoice::MinilmInt8 => {
                        options.runtime = engram_providers::LocalRuntime::OnnxInt8;
                    }
                    EmbedderChoice::Builtin | EmbedderChoice::Minilm => {}
                }
                let e = engram_providers::BertEmbedder::load_with(&dir, options)?;
                eprintln!("{}: {} on {}", self.name(), e.model_id(), e.runtime());
                return Ok(Arc::new(e));
            }
        };
        engram_providers::build_embedder(&cfg)
            .with_context(|| format!("building the {} embedder", self.name()))
    }
}
