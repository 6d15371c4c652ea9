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
//! fuzz tests over ASCII and over Unicode), by one of four paths:
//! - a text that contains an added token (`[CLS]`, …; for a token matched after
//!   normalisation, its first character) takes the plain `encode` path;
//! - with the compiled-in tokenizer, whose pipeline is exactly MiniLM's `BertNormalizer`
//!   (drop control characters, whitespace as a space, spaces around CJK ideographs, NFD
//!   without non-spacing marks, lowercase) and `BertPreTokenizer` (split on whitespace,
//!   isolate punctuation), a hand-written path does the same: on bytes for an ASCII text
//!   (where accent stripping and CJK are no-ops), on characters for any other text, with the
//!   very Unicode tables `tokenizers` uses (`unicode-normalization-alignments`,
//!   `unicode_categories`);
//! - with any other tokenizer, its own normalizer and pre-tokenizer, skipping the full
//!   `Encoding` (token strings, offsets, masks).
//!
//! The fast paths look each word up in the vocabulary before running WordPiece: a word that
//! is itself a vocabulary entry is one token under WordPiece's longest-match-first rule.
//! The tokenizers crate alone does ~65k short sentences/s per core; the ASCII path is several
//! times faster, and the Unicode path about eight times faster than the tokenizer's own
//! normalizer (numbers in the crate README). A text with no
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
    /// The added tokens matched on the raw text (`[CLS]`, …: `normalized: false`): a text
    /// containing one takes the full `encode` path, which extracts added tokens.
    added_raw: Vec<String>,
    /// First characters of the added tokens matched after normalisation (none in MiniLM's):
    /// a text containing one takes the `encode` path too.
    added_starts: Vec<char>,
    /// The tokenizer is the compiled-in MiniLM one, so the hand-written paths apply.
    ascii_path: bool,
    /// Per token id: what it is as a piece of a word ([`Inner::known_share`]).
    pieces: Vec<Piece>,
}

/// A token as a piece of a word, for [`Inner::known_share`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// A word's first piece, or the whole word (`pottery` → `pot`, `lives`).
    Head,
    /// A later piece of a split word (`##tery`).
    Continuation,
    /// `[UNK]`: a word the vocabulary cannot spell.
    Unknown,
    /// Punctuation and special tokens: not a word.
    Other,
}

/// Vocabulary coverage ([`Inner::known_share`]) under which the built-in embedder's cosines
/// carry no meaning ([`BuiltinEmbedder::query_scale`]): German, Spanish and Dutch questions
/// hold 0–33 % of their words (function words left out) whole in MiniLM's English
/// vocabulary, French, Italian and Portuguese ones 20–80 %; of LoCoMo's 999 English
/// questions none holds under 50 %, one 50 %, 1.8 % under 70 %.
const UNKNOWN_LANGUAGE: f64 = 0.4;
/// Coverage from which the built-in embedder's cosines are read at full trust.
const KNOWN_LANGUAGE: f64 = 0.6;

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

/// A "Chinese character" as MiniLM's `BertNormalizer` defines it (the CJK ideograph blocks,
/// not Hangul, Hiragana or Katakana): it is put between spaces, so it is a word of its own.
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
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
        let added = tokenizer.get_added_tokens_decoder();
        let mut added_raw: Vec<String> = added
            .values()
            .filter(|t| !t.normalized && !t.content.is_empty())
            .map(|t| t.content.clone())
            .collect();
        added_raw.sort_unstable();
        added_raw.dedup();
        let mut added_starts: Vec<char> = added
            .values()
            .filter(|t| t.normalized)
            .filter_map(|t| t.content.chars().next())
            .collect();
        added_starts.sort_unstable();
        added_starts.dedup();
        let ascii_path = tokenizer_json == TOKENIZER;
        let mut pieces = vec![Piece::Other; table.rows()];
        for (token, &id) in &words {
            let kind = if token == "[UNK]" {
                Piece::Unknown
            } else if token.starts_with("##") {
                Piece::Continuation
            } else if token.chars().any(char::is_alphanumeric) && !token.starts_with('[') {
                Piece::Head
            } else {
                Piece::Other
            };
            if let Some(p) = pieces.get_mut(id as usize) {
                *p = kind;
            }
        }
        Ok(Self { table, tokenizer, words, added_raw, added_starts, ascii_path, pieces })
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

    /// One normalised character through MiniLM's BertPreTokenizer: whitespace ends the word,
    /// punctuation is a word of its own.
    fn pre_tokenize(
        &self,
        c: char,
        word: &mut String,
        ids: &mut Vec<u32>,
    ) -> tokenizers::Result<()> {
        use unicode_categories::UnicodeCategories;
        if c.is_whitespace() {
            self.flush_word(word, ids)
        } else if c.is_ascii_punctuation() || (!c.is_ascii() && c.is_punctuation()) {
            self.flush_word(word, ids)?;
            word.push(c);
            self.flush_word(word, ids)
        } else {
            word.push(c);
            Ok(())
        }
    }

    /// One ASCII byte through MiniLM's BertNormalizer (clean_text maps `\t`, `\n`, `\r` to a
    /// space and drops every other control character; lowercase; accent stripping and CJK
    /// spacing are no-ops on ASCII), then the pre-tokenizer.
    fn ascii_step(&self, b: u8, word: &mut String, ids: &mut Vec<u32>) -> tokenizers::Result<()> {
        match b {
            b'\t' | b'\n' | b'\r' => self.pre_tokenize(' ', word, ids),
            0x00..=0x1f | 0x7f => Ok(()),
            _ => self.pre_tokenize(char::from(b.to_ascii_lowercase()), word, ids),
        }
    }

    /// MiniLM's BertNormalizer + BertPreTokenizer on an ASCII text (see the module docs).
    fn ascii_token_ids(&self, text: &str, ids: &mut Vec<u32>) -> tokenizers::Result<()> {
        let mut word = String::with_capacity(24);
        for &b in text.as_bytes() {
            self.ascii_step(b, &mut word, ids)?;
        }
        self.flush_word(&mut word, ids)
    }

    /// MiniLM's BertNormalizer + BertPreTokenizer on any text (see the module docs), in the
    /// normaliser's order: clean, CJK spacing, NFD (canonical reordering spans characters),
    /// non-spacing marks dropped, then each character lowercased and pre-tokenized. NFD runs
    /// over each run of non-ASCII characters: an ASCII character decomposes to itself and is
    /// a starter, so no reordering crosses it, and NFD of the whole text is the runs' NFD
    /// with the ASCII characters between them.
    fn unicode_token_ids(&self, text: &str, ids: &mut Vec<u32>) -> tokenizers::Result<()> {
        use unicode_categories::UnicodeCategories;
        let mut word = String::with_capacity(24);
        let mut run = String::new();
        for c in text.chars() {
            if c.is_ascii() {
                self.flush_run(&mut run, &mut word, ids)?;
                self.ascii_step(c as u8, &mut word, ids)?;
            } else if c == '\u{fffd}' || c.is_other() {
                // clean_text drops them.
            } else if c.is_whitespace() || is_chinese_char(c) {
                // clean_text maps whitespace to a space; CJK ideographs get a space each side.
                self.flush_run(&mut run, &mut word, ids)?;
                self.flush_word(&mut word, ids)?;
                if !c.is_whitespace() {
                    run.push(c);
                    self.flush_run(&mut run, &mut word, ids)?;
                    self.flush_word(&mut word, ids)?;
                }
            } else {
                run.push(c);
            }
        }
        self.flush_run(&mut run, &mut word, ids)?;
        self.flush_word(&mut word, ids)
    }

    /// NFD of a run of non-ASCII (cleaned, non-space) characters, non-spacing marks dropped,
    /// lowercased, pre-tokenized into `word`; clears the run.
    fn flush_run(
        &self,
        run: &mut String,
        word: &mut String,
        ids: &mut Vec<u32>,
    ) -> tokenizers::Result<()> {
        use unicode_categories::UnicodeCategories;
        use unicode_normalization_alignments::UnicodeNormalization;
        for (c, _) in run.as_str().nfd() {
            if !c.is_mark_nonspacing() {
                for c in c.to_lowercase() {
                    self.pre_tokenize(c, word, ids)?;
                }
            }
        }
        run.clear();
        Ok(())
    }

    /// Token ids of `text`, without special tokens: the same as
    /// `tokenizer.encode(text, false).get_ids()`.
    fn token_ids(&self, text: &str, ids: &mut Vec<u32>) -> tokenizers::Result<()> {
        if text.contains(&self.added_starts[..])
            || self.added_raw.iter().any(|t| text.contains(t.as_str()))
        {
            ids.extend_from_slice(self.tokenizer.encode_fast(text, false)?.get_ids());
            return Ok(());
        }
        if self.ascii_path {
            return if text.is_ascii() {
                self.ascii_token_ids(text, ids)
            } else {
                self.unicode_token_ids(text, ids)
            };
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

    /// The share of `text`'s words that the vocabulary holds whole (a word WordPiece does
    /// not split, and not `[UNK]`), function words of any language left out
    /// ([`engram_core::words`]); 1 for a text with no other word. The table's rows are
    /// MiniLM's readings of English tokens: a word cut into pieces is read from fragments.
    /// Function words do not count: a German question is mostly words of three letters
    /// English spells too ("Was ist die Lieblingsfarbe des Nutzers?" is 3 of 5 whole, and
    /// 0 of 2 once "was", "ist", "die" and "des" are left out; found by a tester).
    fn known_share(&self, text: &str) -> f64 {
        let (mut words, mut known) = (0usize, 0usize);
        let mut ids = Vec::new();
        for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            if engram_core::words::is_function_word(&word.to_lowercase()) {
                continue;
            }
            ids.clear();
            if self.token_ids(word, &mut ids).is_err() || ids.is_empty() {
                continue;
            }
            let piece = |id: u32| self.pieces.get(id as usize).copied().unwrap_or(Piece::Other);
            // A word of characters without spaces (CJK) is one token per character.
            for (i, &id) in ids.iter().enumerate() {
                match piece(id) {
                    Piece::Head => {
                        words += 1;
                        if ids.get(i + 1).is_none_or(|&next| piece(next) != Piece::Continuation) {
                            known += 1;
                        }
                    }
                    Piece::Unknown => words += 1,
                    Piece::Continuation | Piece::Other => {}
                }
            }
        }
        if words == 0 { 1.0 } else { known as f64 / words as f64 }
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

    /// A query most of whose words the English vocabulary does not hold whole (German,
    /// Spanish, …) is embedded from word fragments, and its cosines say nothing: unrelated
    /// German queries reached 0.88–0.92 against German facts, as high as the right fact
    /// (a tester's finding; `tests/it/relevance.rs`). Its semantic support fades out
    /// between 60 % and 40 % of its words known ([`SimilarityScale::trusting`]); its
    /// relevance then rests on its keywords, which match in any language.
    fn query_scale(&self, query: &str) -> SimilarityScale {
        let known = self.inner.known_share(query);
        let trust = (known - UNKNOWN_LANGUAGE) / (KNOWN_LANGUAGE - UNKNOWN_LANGUAGE);
        self.similarity_scale().trusting(trust)
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
