//! The local embedder on ONNX Runtime (issue 14, item 3): the folder's `model.onnx`
//! (`scripts/export-onnx.py`) with the `onnxruntime` library `scripts/fetch-model.sh` puts
//! beside it. Same vectors as sentence-transformers and as candle, same model id (no
//! re-embed when the runtime changes), requests first, and a graph of other weights refused.

use std::sync::OnceLock;

use engram_core::FaultSource;
use engram_core::embed::Embedder;
use engram_providers::testing::minilm_dir;
use engram_providers::{BertEmbedder, BertOptions, LocalRuntime};

use crate::bert::{backlog, copy_model, golden};
use crate::{assert_unit, cosine};

fn options(runtime: LocalRuntime) -> BertOptions {
    BertOptions { runtime, ..Default::default() }
}

fn onnx() -> &'static BertEmbedder {
    static MODEL: OnceLock<BertEmbedder> = OnceLock::new();
    MODEL.get_or_init(|| {
        let model = BertEmbedder::load_with(&minilm_dir(), options(LocalRuntime::Onnx))
            .expect("load MiniLM on ONNX Runtime (run scripts/fetch-model.sh)");
        assert_eq!(model.runtime(), "onnx");
        model
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_sentence_transformers_and_candle_with_the_same_id() {
    let golden = golden();
    let model = onnx();
    assert_eq!(model.dims(), 384);
    let texts: Vec<String> = golden.items.iter().map(|i| i.text.clone()).collect();
    let batched = model.embed(&texts).await.unwrap();
    let background = model.embed_background(&texts).await.unwrap();
    let candle = BertEmbedder::load_with(&minilm_dir(), options(LocalRuntime::Candle)).unwrap();
    let on_candle = candle.embed(&texts).await.unwrap();
    for (((item, got), bg), c) in golden.items.iter().zip(&batched).zip(&background).zip(&on_candle)
    {
        assert_unit(got);
        // Both runtimes read a long text in the same windows.
        assert!(cosine(got, c) > 0.9999, "{:?}: ONNX Runtime against candle", item.text);
        assert!(cosine(bg, got) > 0.9999, "{:?} in the background", item.text);
        if item.tokens > golden.max_seq_length {
            continue; // read whole, not truncated as sentence-transformers does (bert.rs)
        }
        let cos = cosine(got, &item.vector);
        assert!(cos > 0.9999, "cosine {cos} for {:?}", item.text);
        let alone = model.embed(std::slice::from_ref(&item.text)).await.unwrap();
        assert!(cosine(&alone[0], &item.vector) > 0.9999, "{:?} alone", item.text);
    }
    assert_eq!(model.model_id(), candle.model_id(), "a runtime change must not force a re-embed");
    let auto = BertEmbedder::load(&minilm_dir()).unwrap();
    assert_eq!(auto.runtime(), "onnx", "the default picks ONNX Runtime when the folder has it");
}

/// Issue 14: with ONNX Runtime too, a query's vector comes back while a long background batch
/// is still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_is_served_while_a_long_background_batch_runs() {
    let model = onnx().clone();
    let backlog = backlog(3000);
    let background = {
        let (model, backlog) = (model.clone(), backlog.clone());
        tokio::spawn(async move { model.embed_background(&backlog).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!background.is_finished(), "the batch must still be running when the query comes");
    let query = "what did we plan for the spring?".to_string();
    model.embed(std::slice::from_ref(&query)).await.unwrap();
    assert!(
        !background.is_finished(),
        "the query was served only after the whole background batch"
    );
    assert_eq!(background.await.unwrap().unwrap().len(), backlog.len());
}

/// A `model.onnx` exported from other weights would give vectors of another model under this
/// one's id: it is refused, naming the file and the fix.
#[test]
fn a_graph_of_other_weights_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    copy_model(tmp.path(), "");
    std::fs::copy(minilm_dir().join("model.onnx"), tmp.path().join("model.onnx")).unwrap();
    let mut weights = std::fs::read(tmp.path().join("model.safetensors")).unwrap();
    let last = weights.len() - 1;
    weights[last] ^= 0x01; // one bit of one weight
    std::fs::write(tmp.path().join("model.safetensors"), weights).unwrap();
    let lib = engram_providers::embed::onnx::find_library(&minilm_dir()).expect("library");
    std::fs::copy(&lib, tmp.path().join(lib.file_name().unwrap())).unwrap();
    let err = BertEmbedder::load_with(tmp.path(), options(LocalRuntime::Onnx)).unwrap_err();
    assert_eq!(err.fault, FaultSource::User);
    assert!(err.message.contains("model.onnx"), "{}", err.message);
    assert!(err.message.contains("export-onnx.py"), "{}", err.message);
}

/// Asked for ONNX Runtime without its files: a clear error; on auto, candle.
#[test]
fn without_the_graph_the_folder_runs_on_candle() {
    let tmp = tempfile::tempdir().unwrap();
    copy_model(tmp.path(), "");
    let err = BertEmbedder::load_with(tmp.path(), options(LocalRuntime::Onnx)).unwrap_err();
    assert_eq!(err.fault, FaultSource::User);
    assert!(err.message.contains("model.onnx"), "{}", err.message);
    let auto = BertEmbedder::load(tmp.path()).unwrap();
    assert_eq!(auto.runtime(), "candle");
}

/// `--embedder local-int8:<dir>`: the int8 graph, close to the exact vectors but not the same,
/// so it has its own model id (a store embedded with one is never searched with the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_int8_graph_is_close_and_has_its_own_id() {
    let cfg = engram_providers::EmbedderConfig::LocalInt8 { dir: minilm_dir() };
    let int8 = engram_providers::build_embedder(&cfg).unwrap();
    let exact = onnx();
    assert_eq!(int8.model_id(), format!("{}-int8", exact.model_id()));
    let golden = golden();
    let texts: Vec<String> = golden.items.iter().map(|i| i.text.clone()).collect();
    let got = int8.embed_background(&texts).await.unwrap();
    let cos: Vec<f32> = got.iter().zip(&golden.items).map(|(v, i)| cosine(v, &i.vector)).collect();
    let mean = cos.iter().sum::<f32>() / cos.len() as f32;
    assert!(mean > 0.98, "mean cosine to the exact vectors {mean}: {cos:?}");
    assert!(cos.iter().all(|c| *c > 0.95), "{cos:?}");
    assert!(cos.iter().any(|c| *c < 0.9999), "int8 vectors are not the exact ones: {cos:?}");
}
