//! Local BERT embedder: a sentence-transformers model folder run on the CPU with candle.
//!
//! The folder must hold `config.json` (a BERT config), `tokenizer.json` and
//! `model.safetensors` — the sentence-transformers layout, as `scripts/fetch-model.sh` leaves
//! all-MiniLM-L6-v2. Optional files that are honoured when present:
//! `sentence_bert_config.json` (`max_seq_length`, never above [`MAX_TOKENS`]) and
//! `1_Pooling/config.json` (mean or CLS pooling; mean is the default).
//!
//! Inference mirrors sentence-transformers: tokenize with special tokens, pad each batch to
//! its longest text, run the encoder, mean-pool the last hidden state over the attention
//! mask, L2-normalise. Texts are sorted by length before batching so padding stays small.
//! Where sentence-transformers truncates a text to the model's 256 tokens, engram reads it
//! whole: a longer text is cut into windows of 256 tokens (each with its `[CLS]`/`[SEP]`,
//! [`WINDOW_OVERLAP`] tokens shared with the one before), and its vector is the normalised
//! mean of its windows' vectors weighted by their tokens. A text that fits gets exactly
//! sentence-transformers' vector; a long fact, message or summary is found by what its end
//! says too.
//!
//! **Requests first.** A request's embedding ([`Embedder::embed`]: a search's, a context's, a
//! remember's) runs at once in `tokio::task::spawn_blocking`, on candle's global thread pool
//! at normal scheduling priority, whatever background work is under way. Background batches
//! ([`Embedder::embed_background`]) run on the embedder's own pool of
//! [`BertOptions::background_threads`] threads at the lowest scheduling priority (`SCHED_IDLE` at nice 19 on
//! Linux), in forward passes of at most [`BertOptions::batch_tokens`] padded tokens: they get
//! every core the request path leaves idle, and the kernel hands a core to a request the
//! moment it needs one (a nice-19 thread weighs 15 against a normal thread's 1024). No
//! background pass starts while a request's embedding runs (`engram_core::priority`): two
//! virtual cores are often one physical core, and a pass running beside a request slows it
//! down whatever its priority. So a request shares the CPU at most with the one pass that was
//! already running. Waiting in a queue behind a whole background batch, as one permit for
//! both did, cost searches seconds under load (`benches/README.md`, "Queries first").
//!
//! `model_id()` is `local:<folder name>@<fingerprint>` where the fingerprint is the first 8
//! hex digits of a SHA-256 over `config.json`, the size of `model.safetensors` and sixteen
//! evenly spaced 64 KiB samples of it. Renaming the folder or changing the weights changes
//! the id (which makes the store re-embed); reloading the same files never does.

use engram_core::priority::RequestsInFlight;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use engram_core::embed::{EmbedError, Embedder, SimilarityScale, normalize};
use sha2::{Digest, Sha256};
use tokenizers::{
    PaddingParams, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

/// Longest window, in tokens including `[CLS]` and `[SEP]`; longer texts are read in windows.
pub const MAX_TOKENS: usize = 256;
/// Texts per forward pass.
const BATCH_SIZE: usize = 32;

/// Tokens a window of a long text shares with the window before it (so no sentence is only
/// ever seen cut in two).
pub const WINDOW_OVERLAP: usize = 32;

/// The token windows of a batch of texts: `seqs[k]` belongs to text `owner[k]`.
struct Windows {
    seqs: Vec<Vec<u32>>,
    owner: Vec<usize>,
    texts: usize,
}

impl Windows {
    /// The texts' vectors from their windows' (same order as `seqs`): one window's as it is
    /// (bit for bit), several windows' mean weighted by their tokens, normalised.
    fn combine(
        owner: &[usize],
        weights: &[usize],
        texts: usize,
        vectors: Vec<Vec<f32>>,
    ) -> Vec<Vec<f32>> {
        let mut windows = vec![0usize; texts];
        for &i in owner {
            windows[i] += 1;
        }
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); texts];
        for ((&i, &w), v) in owner.iter().zip(weights).zip(vectors) {
            if windows[i] == 1 {
                out[i] = v;
            } else if out[i].is_empty() {
                out[i] = v.iter().map(|x| x * w as f32).collect();
            } else {
                out[i].iter_mut().zip(&v).for_each(|(a, b)| *a += b * w as f32);
            }
        }
        for (v, n) in out.iter_mut().zip(windows) {
            if n > 1 {
                normalize(v);
            }
        }
        out
    }
}

/// How background batches run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BertOptions {
    /// Padded tokens (texts × longest text) of one background forward pass.
    pub batch_tokens: usize,
    /// Threads of the background pool (lowest scheduling priority); 0 means one per core.
    pub background_threads: usize,
    /// What runs the encoder.
    pub runtime: LocalRuntime,
}

impl Default for BertOptions {
    fn default() -> Self {
        Self { batch_tokens: 4096, background_threads: 0, runtime: LocalRuntime::Auto }
    }
}

/// What runs a local model's encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalRuntime {
    /// ONNX Runtime when the folder has `model.onnx` and the library is found
    /// ([`super::onnx::find_library`]), candle otherwise.
    Auto,
    /// candle, always.
    Candle,
    /// ONNX Runtime, or an error saying what is missing.
    Onnx,
    /// ONNX Runtime on the int8 graph (`model.int8.onnx`: weights quantised per channel,
    /// activations per tensor at run time): about twice as fast again, but other vectors,
    /// so another model id (`…-int8`).
    OnnxInt8,
}

/// The encoder of a loaded model.
enum Encoder {
    Candle(BertModel),
    Onnx(super::onnx::OnnxRuntime),
}

/// How token vectors become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Average over the non-padding tokens (sentence-transformers' usual choice).
    Mean,
    /// The `[CLS]` token's vector.
    Cls,
}

/// A BERT sentence-embedding model loaded from a folder. Cheap to clone.
#[derive(Clone)]
pub struct BertEmbedder {
    inner: Arc<Inner>,
    model_id: String,
    /// Where background batches run: threads of the lowest scheduling priority.
    background: Arc<rayon::ThreadPool>,
    requests: Arc<RequestsInFlight>,
    options: BertOptions,
}

struct Inner {
    encoder: Encoder,
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation: the tokens of a long text's later windows.
    whole: Tokenizer,
    device: Device,
    dims: usize,
    pooling: Pooling,
    max_tokens: usize,
}

impl std::fmt::Debug for BertEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BertEmbedder")
            .field("model_id", &self.model_id)
            .field("dims", &self.inner.dims)
            .field("pooling", &self.inner.pooling)
            .field("max_tokens", &self.inner.max_tokens)
            .field("runtime", &self.runtime())
            .finish()
    }
}

fn read_file(dir: &Path, name: &str) -> Result<Vec<u8>, EmbedError> {
    let path = dir.join(name);
    if !path.is_file() {
        return Err(EmbedError::user(format!(
            "local embedder: {} is missing {name} (expected a sentence-transformers folder with \
             model.safetensors, tokenizer.json and config.json; scripts/fetch-model.sh fetches \
             all-MiniLM-L6-v2)",
            dir.display()
        )));
    }
    std::fs::read(&path).map_err(|e| {
        EmbedError::user(format!("local embedder: cannot read {}: {e}", path.display()))
    })
}

#[derive(serde::Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

#[derive(serde::Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

fn read_pooling(dir: &Path) -> Result<Pooling, EmbedError> {
    let path = dir.join("1_Pooling").join("config.json");
    if !path.is_file() {
        return Ok(Pooling::Mean);
    }
    let bytes = read_file(&dir.join("1_Pooling"), "config.json")?;
    let cfg: PoolingConfig = serde_json::from_slice(&bytes)
        .map_err(|e| EmbedError::user(format!("local embedder: bad {}: {e}", path.display())))?;
    match (
        cfg.pooling_mode_mean_tokens,
        cfg.pooling_mode_cls_token,
        cfg.pooling_mode_max_tokens || cfg.pooling_mode_mean_sqrt_len_tokens,
    ) {
        (true, false, false) => Ok(Pooling::Mean),
        (false, true, false) => Ok(Pooling::Cls),
        _ => Err(EmbedError::user(format!(
            "local embedder: {} asks for a pooling mode other than plain mean or CLS, which is \
             not supported",
            path.display()
        ))),
    }
}

/// `<folder name>@<8 hex>`: see the module docs.
fn fingerprint(config: &[u8], weights: &[u8]) -> String {
    const SAMPLES: usize = 16;
    const SAMPLE_LEN: usize = 64 * 1024;
    let mut h = Sha256::new();
    h.update(config);
    h.update((weights.len() as u64).to_le_bytes());
    if weights.len() <= SAMPLES * SAMPLE_LEN {
        h.update(weights);
    } else {
        let step = (weights.len() - SAMPLE_LEN) / (SAMPLES - 1);
        for i in 0..SAMPLES {
            let start = i * step;
            h.update(&weights[start..start + SAMPLE_LEN]);
        }
    }
    hex::encode(&h.finalize()[..4])
}

fn runtime_err(context: &str) -> impl FnOnce(candle_core::Error) -> EmbedError + '_ {
    move |e| EmbedError::runtime(format!("local embedder: {context}: {e}"))
}

impl BertEmbedder {
    /// Load a model folder. Every problem with the folder is a `User` fault that names it.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        Self::load_with(dir, BertOptions::default())
    }

    /// [`Self::load`] with other [`BertOptions`].
    pub fn load_with(dir: &Path, options: BertOptions) -> Result<Self, EmbedError> {
        if !dir.is_dir() {
            return Err(EmbedError::user(format!(
                "local embedder: model folder {} does not exist (scripts/fetch-model.sh fetches \
                 all-MiniLM-L6-v2 and prints its folder)",
                dir.display()
            )));
        }
        let config_bytes = read_file(dir, "config.json")?;
        let config: BertConfig = serde_json::from_slice(&config_bytes).map_err(|e| {
            EmbedError::user(format!(
                "local embedder: {} is not a BERT config: {e}",
                dir.join("config.json").display()
            ))
        })?;
        if let Some(t) = config.model_type.as_deref()
            && !matches!(t, "bert" | "roberta" | "xlm-roberta" | "camembert")
        {
            return Err(EmbedError::user(format!(
                "local embedder: {} has model_type {t:?}; only BERT-family encoders are supported",
                dir.join("config.json").display()
            )));
        }
        if config.hidden_size == 0
            || config.num_attention_heads == 0
            || !config.hidden_size.is_multiple_of(config.num_attention_heads)
        {
            return Err(EmbedError::user(format!(
                "local embedder: {}: hidden_size {} is not a multiple of num_attention_heads {}",
                dir.join("config.json").display(),
                config.hidden_size,
                config.num_attention_heads
            )));
        }

        let mut max_tokens = MAX_TOKENS.min(config.max_position_embeddings);
        let st_path = dir.join("sentence_bert_config.json");
        if st_path.is_file() {
            let st: SentenceBertConfig =
                serde_json::from_slice(&read_file(dir, "sentence_bert_config.json")?).map_err(
                    |e| EmbedError::user(format!("local embedder: bad {}: {e}", st_path.display())),
                )?;
            if let Some(n) = st.max_seq_length.filter(|n| *n >= 2) {
                max_tokens = max_tokens.min(n);
            }
        }
        let pooling = read_pooling(dir)?;

        let tokenizer_bytes = read_file(dir, "tokenizer.json")?;
        let mut tokenizer = Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| {
            EmbedError::user(format!(
                "local embedder: cannot parse {}: {e}",
                dir.join("tokenizer.json").display()
            ))
        })?;
        // tokenizer.json files often carry fixed padding/truncation (MiniLM's: 128); we pad
        // per batch ourselves and truncate where sentence-transformers does.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| EmbedError::user(format!("local embedder: tokenizer: {e}")))?;
        tokenizer.with_padding(None::<PaddingParams>);
        let mut whole = tokenizer.clone();
        whole
            .with_truncation(None)
            .map_err(|e| EmbedError::user(format!("local embedder: tokenizer: {e}")))?;

        let weights = read_file(dir, "model.safetensors")?;
        let int8 = if options.runtime == LocalRuntime::OnnxInt8 { "-int8" } else { "" };
        let model_id =
            format!("local:{}@{}{int8}", folder_name(dir), fingerprint(&config_bytes, &weights));
        let device = Device::Cpu;
        let graph = super::onnx::graph_file(options.runtime);
        let encoder = match onnx_library(dir, options.runtime, pooling)? {
            Some(library) => Encoder::Onnx(super::onnx::OnnxRuntime::load(
                dir,
                graph,
                &library,
                &weights,
                options.background_threads,
            )?),
            None => {
                let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
                    .map_err(|e| {
                        EmbedError::user(format!(
                            "local embedder: cannot read {}: {e}",
                            dir.join("model.safetensors").display()
                        ))
                    })?;
                Encoder::Candle(BertModel::load(vb, &config).map_err(|e| {
                    EmbedError::user(format!(
                        "local embedder: {} does not match {}: {e}",
                        dir.join("model.safetensors").display(),
                        dir.join("config.json").display()
                    ))
                })?)
            }
        };
        let runtime = if matches!(encoder, Encoder::Onnx(_)) { "onnx" } else { "candle" };
        tracing::info!(model = %model_id, runtime, "local embedder loaded");
        Ok(Self {
            inner: Arc::new(Inner {
                encoder,
                tokenizer,
                whole,
                device,
                dims: config.hidden_size,
                pooling,
                max_tokens,
            }),
            model_id,
            background: Arc::new(background_pool(options.background_threads)?),
            requests: Arc::default(),
            options,
        })
    }

    /// What runs the encoder: `"candle"` or `"onnx"`.
    pub fn runtime(&self) -> &'static str {
        match self.inner.encoder {
            Encoder::Candle(_) => "candle",
            Encoder::Onnx(_) => "onnx",
        }
    }

    /// Longest window in tokens (with `[CLS]`/`[SEP]`); longer texts are read in windows.
    pub fn max_tokens(&self) -> usize {
        self.inner.max_tokens
    }

    /// The tokenizer (truncation set to [`Self::max_tokens`], the rest of a long text in its
    /// overflowing windows; no padding).
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    /// Embed on the calling thread (blocking; for tools and benchmarks, not async code).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed(texts)
    }

    /// Run the encoder on already tokenized sequences (with whatever special tokens the caller
    /// wants) and return the last hidden state of every position of every sequence:
    /// `result[i][j]` is the `dims()`-long vector of token `j` of sequence `i`. Sequences are
    /// padded per call; padding positions are not returned. Used by the distillation tool.
    pub fn hidden_states(&self, seqs: &[Vec<u32>]) -> Result<Vec<Vec<Vec<f32>>>, EmbedError> {
        let (hidden, _mask) = self.inner.forward(seqs)?;
        let hidden: Vec<Vec<Vec<f32>>> =
            hidden.to_vec3().map_err(runtime_err("reading hidden states"))?;
        Ok(hidden
            .into_iter()
            .zip(seqs)
            .map(|(mut rows, seq)| {
                rows.truncate(seq.len());
                rows
            })
            .collect())
    }
}

/// The ONNX Runtime library to run `dir`'s `model.onnx` with, if `runtime` asks for it and
/// the graph can stand for the model (mean pooling: the exported graph pools by mean).
fn onnx_library(
    dir: &Path,
    runtime: LocalRuntime,
    pooling: Pooling,
) -> Result<Option<PathBuf>, EmbedError> {
    use super::onnx::{find_library, graph_file};
    if runtime == LocalRuntime::Candle {
        return Ok(None);
    }
    let file = graph_file(runtime);
    let graph = dir.join(file).is_file();
    let library = find_library(dir);
    match (graph, library, runtime) {
        (true, Some(lib), _) if pooling == Pooling::Mean => Ok(Some(lib)),
        (_, _, LocalRuntime::Auto) => Ok(None),
        (false, _, _) => Err(EmbedError::user(format!(
            "local embedder: {} has no {file} (scripts/fetch-onnx.sh writes it)",
            dir.display()
        ))),
        (true, None, _) => Err(EmbedError::user(format!(
            "local embedder: ONNX Runtime not found: set ORT_DYLIB_PATH or put \
             libonnxruntime.so in {} (scripts/fetch-model.sh does)",
            dir.display()
        ))),
        (true, Some(_), _) => Err(EmbedError::user(format!(
            "local embedder: {} pools by CLS; its ONNX export pools by mean",
            dir.display()
        ))),
    }
}

fn folder_name(dir: &Path) -> String {
    let canonical = dir.canonicalize().unwrap_or_else(|_| PathBuf::from(dir));
    canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_owned())
}

impl Inner {
    /// Pad `seqs` to the longest one and run the encoder: `[b, t, h]` hidden states and the
    /// `[b, t]` f32 mask.
    fn forward(&self, seqs: &[Vec<u32>]) -> Result<(Tensor, Tensor), EmbedError> {
        let Encoder::Candle(model) = &self.encoder else {
            return Err(EmbedError::user(
                "local embedder: hidden states need the candle runtime (LocalRuntime::Candle)",
            ));
        };
        let b = seqs.len();
        let t = seqs.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut ids = vec![0u32; b * t];
        let mut mask = vec![0u32; b * t];
        for (i, seq) in seqs.iter().enumerate() {
            ids[i * t..i * t + seq.len()].copy_from_slice(seq);
            mask[i * t..i * t + seq.len()].fill(1);
        }
        let ids = Tensor::from_vec(ids, (b, t), &self.device).map_err(runtime_err("input"))?;
        let mask = Tensor::from_vec(mask, (b, t), &self.device).map_err(runtime_err("input"))?;
        let types = ids.zeros_like().map_err(runtime_err("input"))?;
        let hidden = model.forward(&ids, &types, Some(&mask)).map_err(runtime_err("forward"))?;
        let mask = mask.to_dtype(DType::F32).map_err(runtime_err("mask"))?;
        Ok((hidden, mask))
    }

    fn pool(&self, hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Vec<Vec<f32>>> {
        match self.pooling {
            Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?.to_vec2(),
            Pooling::Mean => {
                let summed = hidden.broadcast_mul(&mask.unsqueeze(2)?)?.sum(1)?;
                let counts = mask.sum_keepdim(1)?.clamp(1e-9f32, f32::MAX)?;
                summed.broadcast_div(&counts)?.to_vec2()
            }
        }
    }

    /// The token windows of `texts`: one per text that fits (exactly sentence-transformers'
    /// input), more for a longer one — the truncated input first, then windows of the rest,
    /// each overlapping the one before by [`WINDOW_OVERLAP`] tokens and framed by the same
    /// special tokens.
    fn encode(&self, texts: &[String]) -> Result<Windows, EmbedError> {
        let fault = |e| EmbedError::runtime(format!("local embedder: tokenizer: {e}"));
        let mut w = Windows { seqs: Vec::new(), owner: Vec::new(), texts: texts.len() };
        for (i, text) in texts.iter().enumerate() {
            let enc = self.tokenizer.encode_fast(text.as_str(), true).map_err(fault)?;
            let first = enc.get_ids().to_vec();
            let long = !enc.get_overflowing().is_empty() && first.len() >= 3;
            if long {
                let (open, close) = (first[0], first[first.len() - 1]);
                let span = first.len() - 2;
                let step = span - WINDOW_OVERLAP.min(span / 2);
                let all = self.whole.encode_fast(text.as_str(), false).map_err(fault)?;
                let ids = all.get_ids();
                let mut start = step;
                while start + WINDOW_OVERLAP < ids.len() {
                    let end = (start + span).min(ids.len());
                    let mut seq = Vec::with_capacity(end - start + 2);
                    seq.push(open);
                    seq.extend_from_slice(&ids[start..end]);
                    seq.push(close);
                    w.seqs.push(seq);
                    w.owner.push(i);
                    start += step;
                }
            }
            w.seqs.push(first);
            w.owner.push(i);
        }
        Ok(w)
    }

    /// One forward pass over `seqs`: their unit vectors, in order (`background`: on the
    /// background session of ONNX Runtime; candle runs on the calling thread's pool).
    fn vectors(&self, seqs: &[Vec<u32>], background: bool) -> Result<Vec<Vec<f32>>, EmbedError> {
        if let Encoder::Onnx(onnx) = &self.encoder {
            return onnx.vectors(seqs, background);
        }
        let (hidden, mask) = self.forward(seqs)?;
        let mut pooled = self.pool(&hidden, &mask).map_err(runtime_err("pooling"))?;
        pooled.iter_mut().for_each(|v| normalize(v));
        Ok(pooled)
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let Windows { seqs: mut encoded, owner, texts } = self.encode(texts)?;
        let weights: Vec<usize> = encoded.iter().map(Vec::len).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encoded.len()];
        for chunk in by_length(&encoded).chunks(BATCH_SIZE) {
            let seqs: Vec<Vec<u32>> =
                chunk.iter().map(|&i| std::mem::take(&mut encoded[i])).collect();
            for (&i, v) in chunk.iter().zip(self.vectors(&seqs, false)?) {
                out[i] = v;
            }
        }
        Ok(Windows::combine(&owner, &weights, texts, out))
    }
}

/// Indices of `encoded`, longest first, so each batch pads little.
fn by_length(encoded: &[Vec<u32>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..encoded.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(encoded[i].len()));
    order
}

/// Background forward passes: indices (longest first) grouped so that each pass's padded
/// size (texts × its longest) stays within `batch_tokens` (a longer text goes alone) and
/// holds at most [`BATCH_SIZE`] texts.
fn batches(encoded: &[Vec<u32>], batch_tokens: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut longest = 0;
    for i in by_length(encoded) {
        match out.last_mut() {
            Some(s) if s.len() < BATCH_SIZE && (s.len() + 1) * longest <= batch_tokens => s.push(i),
            _ => {
                longest = encoded[i].len().max(1);
                out.push(vec![i]);
            }
        }
    }
    out
}

#[async_trait]
impl Embedder for BertEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    /// all-MiniLM-L6-v2 (a folder named after it): the best cosine a query on an unrelated
    /// topic reaches against a LoCoMo conversation is 0.15 at the median, 0.23 at the 95th
    /// percentile and 0.36 at most, while evidence turns of real questions sit at 0.39 (5th
    /// percentile) to 0.70 (`engram-bench locomo --abstention`, `benches/README.md`); a
    /// paraphrase with no word in common ("which city is her home?" for "The user lives in
    /// Bengaluru.") reaches only 0.29 and a message found by meaning alone ("family coming to
    /// stay" for "My sister is visiting from Lisbon next week.") about 0.24, so the floor sits
    /// at the median of unrelated queries, 0.15: an unrelated query's best neighbour then
    /// counts a little, and the threshold of issue 13 is re-measured at this scale
    /// (`benches/README.md`, "Abstention"). Other models get the default scale.
    fn similarity_scale(&self) -> SimilarityScale {
        if self.model_id.to_ascii_lowercase().contains("minilm") {
            SimilarityScale { floor: 0.15, full: 0.70 }
        } else {
            SimilarityScale::DEFAULT
        }
    }

    fn dims(&self) -> usize {
        self.inner.dims
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inner = Arc::clone(&self.inner);
        let texts = texts.to_vec();
        let request = RequestsInFlight::enter(&self.requests);
        // The request counts until its CPU work really ends, even if this future is dropped.
        tokio::task::spawn_blocking(move || {
            let _request = request;
            inner.embed(&texts)
        })
        .await
        .map_err(worker_failed)?
    }

    async fn embed_background(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let (inner, texts) = (Arc::clone(&self.inner), texts.to_vec());
        let Windows { seqs: mut encoded, owner, texts } =
            self.in_background(move || inner.encode(&texts)).await?;
        let weights: Vec<usize> = encoded.iter().map(Vec::len).collect();
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encoded.len()];
        for batch in batches(&encoded, self.options.batch_tokens) {
            let seqs: Vec<Vec<u32>> =
                batch.iter().map(|&i| std::mem::take(&mut encoded[i])).collect();
            self.requests.idle().await;
            let inner = Arc::clone(&self.inner);
            let vectors = self.in_background(move || inner.vectors(&seqs, true)).await?;
            for (&i, v) in batch.iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok(Windows::combine(&owner, &weights, texts, out))
    }
}

impl BertEmbedder {
    /// Run `work` on the background pool (candle's own parallel loops inside it stay there).
    /// If the caller goes away, the work still ends and its result is dropped.
    async fn in_background<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, EmbedError> + Send + 'static,
    ) -> Result<T, EmbedError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.background.spawn(move || {
            let _ = tx.send(work());
        });
        rx.await.map_err(|_| EmbedError::bug("local embedder: background pool dropped a job"))?
    }
}

/// The background pool: `threads` (0: one per core) threads that lower their own scheduling
/// priority as they start. Where the OS refuses (not Linux, or a sandbox), they run at normal
/// priority and a warning says so.
fn background_pool(threads: usize) -> Result<rayon::ThreadPool, EmbedError> {
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    } else {
        threads
    };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("engram-embed-bg-{i}"))
        .start_handler(|_| {
            if let Err(e) = lowest_priority() {
                tracing::warn!(error = %e, "background embedding runs at normal priority");
            }
        })
        .build()
        .map_err(|e| EmbedError::runtime(format!("local embedder: background threads: {e}")))
}

/// Move the calling thread to Linux's `SCHED_IDLE` policy (it runs only when nothing else
/// wants the core, and a waking request thread preempts it at once); where that is refused,
/// to nice 19. `SCHED_IDLE` has no nice level: the crate takes only its minimum priority
/// (0) for it, and a niceness would be refused.
pub(crate) fn lowest_priority() -> Result<(), thread_priority::Error> {
    use thread_priority::{
        NormalThreadSchedulePolicy, ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
        set_thread_priority_and_policy,
    };
    let me = thread_priority::thread_native_id();
    let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
    set_thread_priority_and_policy(me, ThreadPriority::Min, idle).or_else(|_| {
        set_thread_priority_and_policy(
            me,
            ThreadPriority::Crossplatform(ThreadPriorityValue::MIN),
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other),
        )
    })
}

fn worker_failed(e: tokio::task::JoinError) -> EmbedError {
    EmbedError::bug(format!("local embedder: worker task failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The background pool's threads really run under `SCHED_IDLE` (a refused policy only
    /// logs a warning, so nothing else would notice).
    #[test]
    fn background_threads_run_at_the_idle_policy() {
        use thread_priority::{NormalThreadSchedulePolicy, ThreadSchedulePolicy};
        let pool = background_pool(2).unwrap();
        let policies: Vec<_> = pool.broadcast(|_| thread_priority::thread_schedule_policy());
        for p in policies {
            assert_eq!(p.unwrap(), ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle));
        }
        // The request path's threads keep their normal policy.
        assert_eq!(
            thread_priority::thread_schedule_policy().unwrap(),
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other)
        );
    }

    #[test]
    fn background_batches_stay_within_their_padded_size() {
        let encoded: Vec<Vec<u32>> =
            [10, 300, 40, 40, 12, 8, 100].iter().map(|&n| vec![1u32; n]).collect();
        let s = batches(&encoded, 128);
        assert_eq!(s, vec![vec![1], vec![6], vec![2, 3, 4], vec![0, 5]]);
        for slice in &s {
            let longest = slice.iter().map(|&i| encoded[i].len()).max().unwrap();
            assert!(slice.len() == 1 || slice.len() * longest <= 128, "{slice:?}");
        }
        let mut all: Vec<usize> = s.concat();
        all.sort_unstable();
        assert_eq!(all, (0..encoded.len()).collect::<Vec<_>>(), "every text once");
        let many: Vec<Vec<u32>> = (0..100).map(|_| vec![1u32; 3]).collect();
        assert!(batches(&many, 10_000).iter().all(|s| s.len() <= BATCH_SIZE));
    }
}
