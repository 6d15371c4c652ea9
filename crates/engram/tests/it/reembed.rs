//! Changing the embedder: the store refuses to mix vector spaces, `engram reembed` moves
//! every memory to the new model, and search works again.

use std::process::Command;

use crate::helpers::{Backend, Db, bin};

fn with_builtin(db: &Db) -> Command {
    let mut c = Command::new(bin());
    c.arg("--data-dir")
        .arg(db.dir())
        .args(db.store_args())
        .arg("--embedder")
        .arg("builtin")
        .env("ENGRAM_LOG", "warn");
    c
}

async fn switching_embedders_requires_and_survives_a_reembed(backend: Backend) {
    let db = Db::new(backend).await;
    let dir = &db;
    for f in [
        "The user grows tomatoes on the balcony.",
        "The user is afraid of spiders.",
        "The user speaks Portuguese and Korean.",
    ] {
        let (ok, _, err) = dir.cli(&["remember", f, "--user", "g"]);
        assert!(ok, "{err}");
    }
    // Another model on the same store is refused, with the way out in the message.
    let out = with_builtin(dir).args(["recall", "spiders", "--user", "g"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("engram reembed"), "{err}");
    // Re-embed with the built-in model.
    let out = with_builtin(dir).args(["reembed"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("re-embedded 3 memories"));
    // Running it again has nothing to do.
    let out = with_builtin(dir).args(["reembed"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("re-embedded 0 memories"));
    let out = with_builtin(dir)
        .args(["recall", "which languages does the user speak", "--user", "g", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][0]["memory"]["content"], "The user speaks Portuguese and Korean.");
    assert!(v["results"][0]["memory"]["embedding_model"].as_str().unwrap().starts_with("builtin:"));
    // And the MiniLM server now refuses the store.
    let out = dir.engram().args(["serve", "--addr", "127.0.0.1:0"]).output().unwrap();
    assert!(!out.status.success());
}

on_both_backends!(switching_embedders_requires_and_survives_a_reembed,);
