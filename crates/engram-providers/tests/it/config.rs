//! `build_embedder` for each `EmbedderConfig`.

use engram_core::FaultSource;
use engram_providers::testing::minilm_dir;
use engram_providers::{BUILTIN_MODEL_ID, EmbedderConfig, build_embedder};

#[tokio::test]
async fn builds_each_kind() {
    let builtin = build_embedder(&EmbedderConfig::Builtin).unwrap();
    assert_eq!(builtin.model_id(), BUILTIN_MODEL_ID);
    assert_eq!(builtin.embed(&["hello".to_owned()]).await.unwrap()[0].len(), builtin.dims());

    let local = build_embedder(&EmbedderConfig::Local { dir: minilm_dir() }).unwrap();
    assert!(local.model_id().starts_with("local:"), "{}", local.model_id());
    assert_eq!(local.dims(), 384);

    let err =
        build_embedder(&EmbedderConfig::Local { dir: "/nonexistent/model".into() }).err().unwrap();
    assert_eq!(err.fault, FaultSource::User);

    // Nothing listens on port 9 of the loopback: a probe that cannot connect is a Runtime
    // fault after the retries (the server may come up later), not a hang.
    let cfg = EmbedderConfig::OpenAi {
        base_url: "http://127.0.0.1:9".into(),
        model: "m".into(),
        api_key: None,
        dims: None,
    };
    let err = build_embedder(&cfg).err().unwrap();
    assert_eq!(err.fault, FaultSource::Runtime, "{}", err.message);
}

/// `local:` picks its runtime by the store: int8 for a new store (when the folder has the
/// graph and the CPU has VNNI), the exact model for a store of its vectors, and int8 again for
/// a store already on int8 or of another model; a folder without the graph always gets the
/// exact model.
#[test]
fn local_auto_picks_the_runtime_by_the_store() {
    let dir = minilm_dir();
    assert!(engram_providers::int8_available(&dir), "scripts/fetch-onnx.sh makes the int8 graph");
    let auto = EmbedderConfig::LocalAuto { dir: dir.clone() };
    let int8 = EmbedderConfig::LocalInt8 { dir: dir.clone() };
    let exact = EmbedderConfig::Local { dir: dir.clone() };
    // Where int8 was not measured to keep quality (no VNNI), `local:` stays exact.
    let fast = if engram_providers::int8_keeps_quality() { &int8 } else { &exact };
    assert_eq!(&auto.for_store(None), fast);
    assert_eq!(auto.for_store(Some("local:all-MiniLM-L6-v2@0123abcd")), exact);
    assert_eq!(&auto.for_store(Some("local:all-MiniLM-L6-v2@0123abcd-int8")), fast);
    assert_eq!(&auto.for_store(Some("builtin:minilm-static-v1")), fast);
    assert_eq!(exact.for_store(None), exact);
    assert_eq!(EmbedderConfig::Builtin.for_store(Some("x")), EmbedderConfig::Builtin);

    let bare = tempfile::tempdir().unwrap();
    let no_graph = EmbedderConfig::LocalAuto { dir: bare.path().to_path_buf() };
    assert!(!engram_providers::int8_available(bare.path()));
    assert_eq!(no_graph.for_store(None), EmbedderConfig::Local { dir: bare.path().to_path_buf() });

    // Built without a store, `local:` is what a new store gets.
    let built = build_embedder(&auto).unwrap();
    let id = built.model_id();
    assert_eq!(id.ends_with("-int8"), engram_providers::int8_keeps_quality(), "{id}");
}
