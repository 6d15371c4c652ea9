//! The BERT embedder on candle: parity with sentence-transformers, and folder errors.

use std::sync::OnceLock;

use engram_core::FaultSource;
use engram_core::embed::Embedder;
use engram_providers::testing::minilm_dir;
use engram_providers::{BertEmbedder, BertOptions, LocalRuntime};

use crate::{assert_unit, cosine};

fn minilm() -> &'static BertEmbedder {
    static MODEL: OnceLock<BertEmbedder> = OnceLock::new();
    MODEL.get_or_init(|| {
        let candle = BertOptions { runtime: LocalRuntime::Candle, ..Default::default() };
        let model = BertEmbedder::load_with(&minilm_dir(), candle).expect("load MiniLM");
        assert_eq!(model.runtime(), "candle");
        model
    })
}

#[derive(serde::Deserialize)]
pub struct Golden {
    pub max_seq_length: usize,
    pub items: Vec<GoldenItem>,
}

#[derive(serde::Deserialize)]
pub struct GoldenItem {
    pub text: String,
    pub tokens: usize,
    pub vector: Vec<f32>,
}

pub fn golden() -> Golden {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/minilm_golden.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read golden fixture"))
        .expect("parse golden fixture")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_sentence_transformers_golden_vectors() {
    let golden = golden();
    assert!(golden.items.len() >= 8);
    assert!(
        golden.items.iter().any(|i| i.tokens > golden.max_seq_length),
        "the fixture must exercise truncation"
    );
    let model = minilm();
    assert_eq!(model.dims(), 384);
    assert_eq!(model.max_tokens(), golden.max_seq_length);
    let texts: Vec<String> = golden.items.iter().map(|i| i.text.clone()).collect();
    // Batched (with padding) and one by one must both match.
    let batched = model.embed(&texts).await.unwrap();
    assert_eq!(batched.len(), texts.len());
    let mut worst = f32::MAX;
    for (item, got) in golden.items.iter().zip(&batched) {
        assert_eq!(got.len(), 384);
        assert_unit(got);
        if item.tokens > golden.max_seq_length {
            // sentence-transformers embeds the first 256 tokens; engram reads the text whole,
            // and its first window is exactly what sentence-transformers embeds.
            let enc = model.tokenizer().encode_fast(item.text.as_str(), true).unwrap();
            assert_eq!(enc.get_ids().len(), golden.max_seq_length);
            assert!(!enc.get_overflowing().is_empty(), "the rest comes as windows");
            let first = model.tokenizer().decode(enc.get_ids(), true).unwrap();
            let alone = model.embed(&[first]).await.unwrap();
            let cos = cosine(&alone[0], &item.vector);
            assert!(cos > 0.999, "cosine {cos} for the first window of {:?}", item.text);
            // This text repeats one passage: the whole reads almost like its first window
            // (0.986: the second window starts mid-passage).
            let whole = cosine(got, &item.vector);
            assert!(whole > 0.97, "{whole}");
            continue;
        }
        let cos = cosine(got, &item.vector);
        worst = worst.min(cos);
        assert!(cos > 0.999, "cosine {cos} for {:?}", item.text);
        let alone = model.embed(std::slice::from_ref(&item.text)).await.unwrap();
        let cos = cosine(&alone[0], &item.vector);
        assert!(cos > 0.999, "cosine {cos} for {:?} embedded alone", item.text);
    }
    eprintln!("lowest cosine vs sentence-transformers: {worst:.7}");
}

/// A text longer than the model reads at once is read whole: what its end says moves its
/// vector (with truncation at 256 tokens it would not), the same through a request and in the
/// background, and a text that fits keeps sentence-transformers' vector (above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_text_is_read_whole() {
    let model = minilm();
    let head =
        "We talked about the vegetable garden, the tomatoes, the basil and the roses. ".repeat(20);
    let tail = "My sister Ana moved to Lisbon to work as a marine biologist at the aquarium.";
    let texts = vec![head.clone(), format!("{head}{tail}")];
    let tokens = model.tokenizer().encode_fast(texts[1].as_str(), true).unwrap();
    assert!(!tokens.get_overflowing().is_empty(), "the text passes 256 tokens");
    let v = model.embed(&texts).await.unwrap();
    assert_unit(&v[1]);
    let q = model.embed(&["Where does Ana live and what does she do?".to_string()]).await.unwrap();
    let (without, with) = (cosine(&q[0], &v[0]), cosine(&q[0], &v[1]));
    assert!(with > without + 0.05, "the tail counts: {with} against {without} without it");
    // The background path reads it the same way.
    let bg = model.embed_background(&texts).await.unwrap();
    assert!(cosine(&bg[1], &v[1]) > 0.9999);
    assert!(cosine(&bg[0], &v[0]) > 0.9999);
}

#[tokio::test]
async fn model_id_is_stable_and_names_the_folder() {
    let dir = minilm_dir();
    let a = minilm();
    let b = BertEmbedder::load(&dir).unwrap();
    assert_eq!(a.model_id(), b.model_id());
    let name = dir.canonicalize().unwrap().file_name().unwrap().to_string_lossy().into_owned();
    let id = a.model_id();
    let fp = id.strip_prefix(&format!("local:{name}@")).unwrap_or_else(|| panic!("{id}"));
    assert_eq!(fp.len(), 8);
    assert!(fp.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    assert!(a.embed(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn embedding_does_not_block_the_runtime() {
    // A current-thread runtime: if embed ran the forward pass inline, the ticker could not
    // advance while it runs.
    let model = minilm().clone();
    let texts: Vec<String> =
        (0..64).map(|i| format!("sentence number {i} about memories")).collect();
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            t.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let start = std::time::Instant::now();
    let out = model.embed(&texts).await.unwrap();
    let elapsed = start.elapsed();
    ticker.abort();
    assert_eq!(out.len(), 64);
    let ticks = ticks.load(std::sync::atomic::Ordering::Relaxed);
    if elapsed > std::time::Duration::from_millis(100) {
        assert!(ticks >= 3, "runtime starved: {ticks} ticks in {elapsed:?}");
    }
}

pub fn copy_model(to: &std::path::Path, skip: &str) {
    let dir = minilm_dir();
    for f in ["model.safetensors", "tokenizer.json", "config.json"] {
        if f != skip {
            std::fs::copy(dir.join(f), to.join(f)).unwrap();
        }
    }
}

#[test]
fn missing_folder_is_a_user_fault() {
    let err = BertEmbedder::load(std::path::Path::new("/nonexistent/engram-model")).unwrap_err();
    assert_eq!(err.fault, FaultSource::User);
    assert!(err.message.contains("/nonexistent/engram-model"), "{}", err.message);
    assert!(err.message.contains("does not exist"), "{}", err.message);
}

#[test]
fn missing_files_are_user_faults_naming_the_file() {
    for missing in ["model.safetensors", "tokenizer.json", "config.json"] {
        let tmp = tempfile::tempdir().unwrap();
        copy_model(tmp.path(), missing);
        let err = BertEmbedder::load(tmp.path()).unwrap_err();
        assert_eq!(err.fault, FaultSource::User, "{missing}: {}", err.message);
        assert!(err.message.contains(missing), "{missing}: {}", err.message);
    }
}

#[test]
fn bad_config_is_a_user_fault() {
    let tmp = tempfile::tempdir().unwrap();
    copy_model(tmp.path(), "config.json");
    std::fs::write(tmp.path().join("config.json"), "{\"hidden_size\": \"big\"}").unwrap();
    let err = BertEmbedder::load(tmp.path()).unwrap_err();
    assert_eq!(err.fault, FaultSource::User);
    assert!(err.message.contains("config.json"), "{}", err.message);

    // Valid JSON, wrong shapes for these weights.
    let cfg = std::fs::read_to_string(minilm_dir().join("config.json")).unwrap();
    let cfg = cfg.replace("\"hidden_size\": 384", "\"hidden_size\": 768");
    assert!(cfg.contains("768"));
    std::fs::write(tmp.path().join("config.json"), cfg).unwrap();
    let err = BertEmbedder::load(tmp.path()).unwrap_err();
    assert_eq!(err.fault, FaultSource::User);
    assert!(err.message.contains("does not match"), "{}", err.message);
}

#[test]
fn hidden_states_return_every_position() {
    let model = minilm();
    let seqs = vec![vec![101, 2054, 102], vec![101, 102]];
    let hs = model.hidden_states(&seqs).unwrap();
    assert_eq!(hs.len(), 2);
    assert_eq!(hs[0].len(), 3);
    assert_eq!(hs[1].len(), 2);
    assert!(hs.iter().flatten().all(|v| v.len() == 384));
}

/// `n` documents of a busy conversation's backlog.
pub fn backlog(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            format!(
                "Message {i}: we talked about the garden, the new shed, the tomatoes that \
                 did not ripen this year and the trip to the coast planned for the spring."
            )
        })
        .collect()
}

/// Issue 14: a request's embedding never waits for background work. A long background batch
/// (the backlog of a busy conversation) is under way when a query arrives; the query's vector
/// comes back while the batch is still running, and both give the same vectors as alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_is_served_while_a_long_background_batch_runs() {
    let model = minilm().clone();
    let backlog = backlog(400);
    let background = {
        let (model, backlog) = (model.clone(), backlog.clone());
        tokio::spawn(async move { model.embed_background(&backlog).await })
    };
    // Let the batch get going.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!background.is_finished(), "the batch must still be running when the query comes");
    let query = "what did we plan for the spring?".to_string();
    let got = model.embed(std::slice::from_ref(&query)).await.unwrap();
    assert!(
        !background.is_finished(),
        "the query was served only after the whole background batch"
    );
    let vectors = background.await.unwrap().unwrap();
    assert_eq!(vectors.len(), backlog.len());
    // Same vectors either way: the lane changes when, never what.
    let alone = model.embed(&backlog[..3]).await.unwrap();
    for (a, b) in alone.iter().zip(&vectors) {
        assert!(cosine(a, b) > 0.9999);
    }
    let again = model.embed(std::slice::from_ref(&query)).await.unwrap();
    assert!(cosine(&got[0], &again[0]) > 0.9999);
}
