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
