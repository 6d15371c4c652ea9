//! Which embedder a benchmark runs: the built-in static model or MiniLM (candle, CPU).

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
    /// (fetched by `scripts/fetch-model.sh`).
    Minilm,
}

impl EmbedderChoice {
    pub fn name(self) -> &'static str {
        match self {
            EmbedderChoice::Builtin => "builtin",
            EmbedderChoice::Minilm => "minilm",
        }
    }

    /// Build the embedder (MiniLM: loads ~90 MB of weights).
    pub fn build(self) -> anyhow::Result<Arc<dyn Embedder>> {
        let cfg = match self {
            EmbedderChoice::Builtin => EmbedderConfig::Builtin,
            EmbedderChoice::Minilm => {
                let dir = engram_providers::testing::minilm_dir_candidate();
                anyhow::ensure!(
                    dir.join("model.safetensors").is_file(),
                    "MiniLM not found in {}: run scripts/fetch-model.sh or set {}",
                    dir.display(),
                    engram_providers::testing::MINILM_DIR_ENV
                );
                EmbedderConfig::Local { dir }
            }
        };
        engram_providers::build_embedder(&cfg)
            .with_context(|| format!("building the {} embedder", self.name()))
    }
}
