//! Changing the embedder: the store refuses to mix vector spaces, `engram reembed` moves
//! every memory to the new model, and search works again.

use std::process::Command;

use crate::helpers::Bounded as _;
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
    let out =
        with_builtin(dir).args(["recall", "spiders", "--user", "g"]).output_bounded().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("engram reembed"), "{err}");
    // A conversation with a summary of the DAG, embedded by the old model, as the compactor
    // writes them.
    summarized_conversation(dir).await;
    // Re-embed with the built-in model: memories, messages and summaries (found by a session:
    // summaries kept the old model's vectors, and `engram migrate` then refused the store).
    let out = with_builtin(dir).args(["reembed"]).output_bounded().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("re-embedded 3 memories, 1 messages and 1 summaries"), "{said}");
    // Running it again has nothing to do.
    let out = with_builtin(dir).args(["reembed"]).output_bounded().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.contains("re-embedded 0 memories, 0 messages and 0 summaries"), "{said}");
    let out = with_builtin(dir)
        .args(["recall", "which languages does the user speak", "--user", "g", "--json"])
        .output_bounded()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][0]["memory"]["content"], "The user speaks Portuguese and Korean.");
    assert!(v["results"][0]["memory"]["embedding_model"].as_str().unwrap().starts_with("builtin:"));
    // And the MiniLM server now refuses the store.
    let out = dir.engram().args(["serve", "--addr", "127.0.0.1:0"]).output_bounded().unwrap();
    assert!(!out.status.success());
}

on_both_backends!(switching_embedders_requires_and_survives_a_reembed,);

/// One message of user `g` and a leaf summary over it with a vector of the store's current
/// model, written through the store.
async fn summarized_conversation(db: &Db) {
    use engram_core::model::{
        ConversationId, Message, MessageId, MessageRole, Summary, SummaryId, SummaryKind, TenantId,
        UserId,
    };
    use engram_core::store::{NewSummary, Store, SummaryClaim};
    let store: std::sync::Arc<dyn Store> = match db.url() {
        Some(url) => engram_store::open_postgres(url).await.unwrap(),
        None => engram_store::open_sqlite(db.dir()).await.unwrap(),
    };
    let (tenant, user) = (TenantId::default_tenant(), UserId::parse("g").unwrap());
    let conv = ConversationId::parse("garden").unwrap();
    let at = time::macros::datetime!(2026-11-20 10:00 UTC);
    let message = Message {
        id: MessageId::new(),
        tenant_id: tenant.clone(),
        conversation_id: conv.clone(),
        user_id: user.clone(),
        agent_id: None,
        seq: 0,
        role: MessageRole::User,
        content: "The tomatoes are ripe.".into(),
        tool_name: None,
        tool_args: None,
        tool_result: None,
        turn_id: None,
        metadata: serde_json::json!({}),
        created_at: at,
        rating: 0,
        access_count: 0,
        last_accessed_at: None,
    };
    store.append_messages(&tenant, vec![message]).await.unwrap();
    let (model, dims) = store.embedding_space().await.unwrap().unwrap();
    let leaf = Summary {
        id: SummaryId::new(),
        tenant_id: tenant.clone(),
        user_id: user,
        conversation_id: conv,
        parent_id: None,
        depth: 0,
        kind: SummaryKind::Leaf,
        content: "[leaf summary, 20 November 2026] The tomatoes ripened.".into(),
        message_count: 1,
        earliest_at: at,
        latest_at: at,
        model: Some("main".into()),
        created_at: at,
        access_count: 0,
        last_accessed_at: None,
    };
    let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 1 };
    let mut vector = vec![0.0; dims];
    vector[0] = 1.0;
    let embedding = Some((model, vector));
    assert!(
        store
            .insert_summary(
                &tenant,
                NewSummary { summary: leaf, sources: vec![], embedding, claim }
            )
            .await
            .unwrap()
    );
}
