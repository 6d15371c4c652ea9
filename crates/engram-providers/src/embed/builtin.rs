//! The built-in static embedder: one vector per token, averaged.
//!
//! A model2vec-style static model distilled from all-MiniLM-L6-v2 (see the crate README for
//! how, and `examples/distill_builtin.rs` for the tool). Both the table and the MiniLM
//! `tokenizer.json` are compiled into the binary with `include_bytes!`, so this embedder works
//! on a fresh machine with no download.
//!
//! Inference: tokenize with the MiniLM WordPiece tokenizer (no special tokens), sum the rows
//! of the tokens (each row already carries its token's weight), L2-normalise.
//!
//! Tokenization gives exactly the ids of `Tokenizer::encode(text, false)` (tested, including
//! a fuzz test), by one of three paths:
//! - a text that could contain an added token (`[CLS]`, …) takes the plain `encode` path;
//! - an ASCII text takes a hand-written path equal to MiniLM's `BertNormalizer` (drop control
//!   characters, whitespace splits, lowercase; accent stripping is a no-op on ASCII) and
//!   `BertPreTokenizer` (split on whitespace, isolate punctuation) — used only with the
//!   compiled-in tokenizer, whose pipeline is exactly that;
//! - any other text runs the tokenizer's own normalizer and pre-tokenizer, skipping the full
//!   `Encoding` (token strings, offsets, masks).
//!
//! Both fast paths look each word up in the vocabulary before running WordPiece: a word that
//! is itself a vocabulary entry is one token under WordPiece's longest-match-first rule.
//! The tokenizers crate alone does ~65k short sentences/s per core; the ASCII path is several
//! times faster (numbers in the crate README). A text with no
//! known token (empty, only emoji, …) gets row 0 — `[PAD]`, which tokenization never emits —
//! where the table keeps the vector MiniLM gives the empty text, so every output is a unit
//! vector.
//!
//! # Table format (`assets/minilm-static.bin`, all integers little-endian)
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `b"EGSTATIC"` |
//! | 8 | 4 | `u32` format version, `1` |
//! | 12 | 4 | `u32` rows (= tokenizer vocabulary size) |
//! | 16 | 4 | `u32` dims |
//! | 20 | 4 | `u32` encoding: `1` = int8 with one `f32` scale per row |
//! | 24 | 4 | `u32` length `m` of the metadata |
//! | 28 | m | metadata: UTF-8 JSON describing how the table was made (informative only) |
//! | 28+m | 4·rows | `f32` scale of each row |
//! | 28+m+4·rows | rows·dims | `i8` values, row-major |
//!
//! Row `r` is `scale[r] * values[r]`. A row of zeros (with scale 0) is a token that carries
//! no meaning (special and unused tokens).

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use engram_core::embed::{EmbedError, Embedder, SimilarityScale, normalize};
use std::collections::HashMap;

use tokenizers::{
    Model, NormalizedString, Normalizer, OffsetReferential, OffsetType, PaddingParams,
    PreTokenizedString, PreTokenizer, Tokenizer,
};

/// `model_id()` of the built-in embedder. Persisted with every vector: a new table (new
/// weights, dims or tokenizer) must get a new id.
pub const BUILTIN_MODEL_ID: &str = "builtin:minilm-static-v1";

const TABLE: &[u8] = include_bytes!("../../assets/minilm-static.bin");
const TOKENIZER: &[u8] = include_bytes!("../../assets/tokenizer.json");

const MAGIC: &[u8; 8] = b"EGSTATIC";
const VERSION: u32 = 1;
const ENCODING_I8: u32 = 1;
const HEADER_LEN: usize = 28;

/// Batches with more text than this (in bytes) are embedded on the blocking pool; smaller
/// ones inline (a short sentence takes a few µs, less than a thread hand-off).
const INLINE_BYTES: usize = 16 * 1024;

/// A parsed static embedding table (see the module docs for the file format).
#[derive(Clone)]
pub struct StaticTable {
    rows: usize,
    dims: usize,
    metadata: String,
    scales: Vec<f32>,
    values: Cow<'static, [u8]>,
    /// Byte offset of the values inside `values`.
    values_at: usize,
}

impl std::fmt::Debug for StaticTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticTable")
            .field("rows", &self.rows)
            .field("dims", &self.dims)
            .field("metadata", &self.metadata)
            .finish()
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

impl StaticTable {
    /// Parse a table file. Errors are `User` faults (a table given by the operator is bad).
    pub fn parse(bytes: Cow<'static, [u8]>) -> Result<Self, EmbedError> {
        let bad = |why: &str| EmbedError::user(format!("static embedding table: {why}"));
        if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
            return Err(bad("not an EGSTATIC file"));
        }
        let version = u32_at(&bytes, 8);
        if version != VERSION {
            return Err(bad(&format!("unsupported version {version}")));
        }
        let rows = u32_at(&bytes, 12) as usize;
        let dims = u32_at(&bytes, 16) as usize;
        let encoding = u32_at(&bytes, 20);
        if encoding != ENCODING_I8 {
            return Err(bad(&format!("unsupported encoding {encoding}")));
        }
        let meta_len = u32_at(&bytes, 24) as usize;
        let scales_at = HEADER_LEN + meta_len;
        let values_at = scales_at + 4 * rows;
        if rows == 0 || dims == 0 || bytes.len() != values_at + rows * dims {
            return Err(bad("size does not match its header"));
        }
        let metadata = std::str::from_utf8(&bytes[HEADER_LEN..scales_at])
            .map_err(|_| bad("metadata is not UTF-8"))?
            .to_owned();
        let scales = bytes[scales_at..values_at]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(Self { rows, dims, metadata, scales, values: bytes, values_at })
    }

    /// Quantise `rows` (all of length `dims`) to int8 with a per-row scale and serialise.
    pub fn encode(rows: &[Vec<f32>], dims: usize, metadata: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + metadata.len() + rows.len() * (dims + 4));
        out.extend_from_slice(MAGIC);
        for v in [VERSION, rows.len() as u32, dims as u32, ENCODING_I8, metadata.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(metadata.as_bytes());
        let mut values = Vec::with_capacity(rows.len() * dims);
        for row in rows {
            assert_eq!(row.len(), dims, "every row must have {dims} values");
            let max = row.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = if max > 0.0 { max / 127.0 } else { 0.0 };
            out.extend_from_slice(&scale.to_le_bytes());
            values.extend(row.iter().map(|x| {
                let q = if scale > 0.0 { (x / scale).round().clamp(-127.0, 127.0) } else { 0.0 };
                (q as i8).to_le_bytes()[0]
            }));
        }
        out.extend_from_slice(&values);
        out
    }

    /// Number of rows (vocabulary size).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Length of every row.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The JSON the distillation tool recorded about how the table was made.
    pub fn metadata(&self) -> &str {
        &self.metadata
    }

    /// Add row `id` to `acc`; returns false (and adds nothing) for an unknown or zero row.
    #[inline]
    fn add_row(&self, id: usize, acc: &mut [f32]) -> bool {
        if id >= self.rows {
            return false;
        }
        let scale = self.scales[id];
        if scale == 0.0 {
            return false;
        }
        let start = self.values_at + id * self.dims;
        let row = &self.values[start..start + self.dims];
        for (a, &q) in acc.iter_mut().zip(row) {
            *a += scale * f32::from(q as i8);
        }
        true
    }

    /// Row `id`, dequantised.
    pub fn row(&self, id: usize) -> Vec<f32> {
        let mut v = vec![0.0; self.dims];
        self.add_row(id, &mut v);
        v
    }
}

/// The default embedder: the compiled-in static table + MiniLM tokenizer. Cheap to clone.
#[derive(Clone)]
pub struct BuiltinEmbedder {
    inner: Arc<Inner>,
    model_id: String,
}

struct Inner {
    table: StaticTable,
    tokenizer: Tokenizer,
    /// WordPiece vocabulary (word → id) for the one-token shortcut.
    words: HashMap<String, u32>,
    /// First characters of the added tokens (`[CLS]`, …): a text containing one of them
    /// takes the full `encode` path, which extracts added tokens.
    added_starts: Vec<char>,
    /// The tokenizer is the compiled-in MiniLM one, so the hand-written ASCII path applies.
    ascii_path: bool,
}

impl std::fmt::Debug for BuiltinEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltinEmbedder")
            .field("model_id", &self.model_id)
            .field("table", &self.inner.table)
            .finish()
    }
}

impl BuiltinEmbedder {
    /// The compiled-in model. Parsed once per process; later calls share it.
    pub fn new() -> Result<Self, EmbedError> {
        static SHARED: OnceLock<Result<Arc<Inner>, EmbedError>> = OnceLock::new();
        let inner = SHARED
            .get_or_init(|| {
                Inner::new(StaticTable::parse(Cow::Borrowed(TABLE))?, TOKENIZER).map(Arc::new)
            })
            .clone()
            // The compiled-in assets are ours: failing to parse them is a defect.
            .map_err(|e| EmbedError::bug(format!("built-in embedder: {}", e.message)))?;
        Ok(Self { inner, model_id: BUILTIN_MODEL_ID.to_owned() })
    }

    /// Another table and tokenizer (used by the evaluation tools to compare variants).
    pub fn from_parts(
        table: StaticTable,
        tokenizer_json: &[u8],
        model_id: impl Into<String>,
    ) -> Result<Self, EmbedError> {
        Ok(Self { inner: Arc::new(Inner::new(table, tokenizer_json)?), model_id: model_id.into() })
    }

    /// The compiled-in MiniLM `tokenizer.json`.
    pub fn tokenizer_json() -> &'static [u8] {
        TOKENIZER
    }

    /// The table in use.
    pub fn table(&self) -> &StaticTable {
        &self.inner.table
    }

    /// The token ids the embedder averages for `text` (no special tokens).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let mut ids = Vec::new();
        self.inner
            .token_ids(text, &mut ids)
            .map_err(|e| EmbedError::runtime(format!("static embedder: tokenizer: {e}")))?;
        Ok(ids)
    }

    /// Embed one text on the calling thread.
    pub fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.inner.embed_one(text)
    }

    /// Embed on the calling thread (for tools and benchmarks).
    pub fn embed_blocking(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts.iter().map(|t| self.inner.embed_one(t)).collect()
    }
}

impl Inner {
    fn new(table: StaticTable, tokenizer_json: &[u8]) -> Result<Self, EmbedError> {
        let mut tokenizer = Tokenizer::from_bytes(tokenizer_json)
            .map_err(|e| EmbedError::user(format!("static embedder: bad tokenizer.json: {e}")))?;
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::user(format!("static embedder: tokenizer: {e}")))?;
        tokenizer.with_padding(None::<PaddingParams>);
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > table.rows() {
            return Err(EmbedError::user(format!(
                "static embedder: the tokenizer has {vocab} tokens but the table only {} rows",
                table.rows()
            )));
        }
        let words = tokenizer.get_model().get_vocab();
        let mut added_starts: Vec<char> = tokenizer
            .get_added_tokens_decoder()
            .values()
            .filter_map(|t| t.content.chars().next())
            .collect();
        added_starts.sort_unstable();
        added_starts.dedup();
        let ascii_path = tokenizer_json == TOKENIZER;
        Ok(Self { table, tokenizer, words, added_starts, ascii_path })
    }

    /// Push the id(s) of one pre-tokenized, normalised word and clear it.
    fn flush_word(&self, word: &mut String, ids: &mut Vec<u32>) -> tokenizers::Result<()> {
        if !word.is_empty() {
            match self.words.get(word.as_str()) {
                Some(&id) => ids.push(id),
                None => {
                    ids.extend(self.tokenizer.get_model().tokenize(word)?.into_iter().map(|t| t.id))
                }
            }
            word.clear();
        }
        Ok(())
    }

    /// MiniLM's BertNormalizer + BertPreTokenizer on an ASCII text (see the module docs).
    fn ascii_token_ids(&self, text: &str, ids: &mut Vec<u32>) -> tokenizers::Result<()> {
        let mut word = String::with_capacity(24);
        for &b in text.as_bytes() {
            match b {
                // clean_text maps these to ' '; the pre-tokenizer splits on whitespace.
                b'\t' | b'\n' | b'\r' | b' ' => self.flush_word(&mut word, ids)?,
                // clean_text drops NUL and every other control character (category Cc).
                0x00..=0x1f | 0x7f => {}
                // The pre-tokenizer isolates punctuation.
                _ if b.is_ascii_punctuation() => {
                    self.flush_word(&mut word, ids)?;
                    word.push(char::from(b));
                    self.flush_word(&mut word, ids)?;
                }
                _ => word.push(char::from(b.to_ascii_lowercase())),
            }
        }
        self.flush_word(&mut word, ids)
    }

    /// Token ids of `text`, without special tokens: the same as
    /// `tokenizer.encode(text, false).get_ids()`.
    fn token_ids(&self, text: &str, ids: &mut Vec<u32>) -> tokenizers::Result<()> {
        if text.contains(&self.added_starts[..]) {
            ids.extend_from_slice(self.tokenizer.encode_fast(text, false)?.get_ids());
            return Ok(());
        }
        if self.ascii_path && text.is_ascii() {
            return self.ascii_token_ids(text, ids);
        }
        let mut normalized = NormalizedString::from(text);
        if let Some(n) = self.tokenizer.get_normalizer() {
            n.normalize(&mut normalized)?;
        }
        let mut pre = PreTokenizedString::from(normalized);
        if let Some(p) = self.tokenizer.get_pre_tokenizer() {
            p.pre_tokenize(&mut pre)?;
        }
        let model = self.tokenizer.get_model();
        for (word, _, _) in pre.get_splits(OffsetReferential::Normalized, OffsetType::None) {
            match self.words.get(word) {
                Some(&id) => ids.push(id),
                None => ids.extend(model.tokenize(word)?.into_iter().map(|t| t.id)),
            }
        }
        Ok(())
    }

    fn embed_one(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 4);
        self.token_ids(text, &mut ids)
            .map_err(|e| EmbedError::runtime(format!("static embedder: tokenizer: {e}")))?;
        let mut acc = vec![0f32; self.table.dims()];
        let mut any = false;
        for &id in &ids {
            any |= self.table.add_row(id as usize, &mut acc);
        }
        if !any {
            self.table.add_row(0, &mut acc);
        }
        normalize(&mut acc);
        Ok(acc)
    }
}

#[async_trait]
impl Embedder for BuiltinEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dims(&self) -> usize {
        self.inner.table.dims()
    }

    /// Averaged static token vectors share a large common component: unrelated texts reach
    /// a cosine of 0.75 (median best match of a query on another topic against a LoCoMo
    /// conversation; 0.85 at the 95th percentile), while evidence turns of real questions
    /// sit at 0.82–0.94 (`engram-bench locomo --abstention`, `benches/README.md`).
    fn similarity_scale(&self) -> SimilarityScale {
        SimilarityScale { floor: 0.86, full: 0.97 }
    }

    /// The sum of the message's token vectors is already in its document's vector: adding
    /// the message alone lowered LoCoMo turn Recall@10 (0.761 → 0.722, `benches/README.md`,
    /// "LoCoMo: a message's vector reads it alone too").
    fn adds_message_alone(&self) -> bool {
        false
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let bytes: usize = texts.iter().map(String::len).sum();
        if bytes <= INLINE_BYTES {
            return self.embed_blocking(texts);
        }
        let inner = Arc::clone(&self.inner);
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || texts.iter().map(|t| inner.embed_one(t)).collect())
            .await
            .map_err(|e| EmbedError::bug(format!("built-in embedder: worker task failed: {e}")))?
    }
}
