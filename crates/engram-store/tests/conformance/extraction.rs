//! apply_extraction: one batch and its cursor, all or nothing.

use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{ConversationId, EventKind, MemoryId, MessageRole, SourceKind};
use engram_core::store::{ExtractionBatch, MemoryFilter, NewMemory, Store};

use crate::harness::{MODEL, event, memory, message, new_row, tenant, unit, user};

pub async fn apply_extraction_is_atomic(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let c = ConversationId::parse("conv").unwrap();
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let msgs = s
        .append_messages(
            &t,
            vec![message(&t, &u, "conv", MessageRole::User, "I moved to Lyon; I love cheese")],
        )
        .await
        .unwrap();
    let existing = new_row(memory(&t, &u, "The user lives in Paris"), Some(unit(4, 1)));
    let restated = new_row(memory(&t, &u, "The user likes cheese"), Some(unit(4, 2)));
    s.insert_memories(&t, vec![existing.clone(), restated.clone()]).await.unwrap();
    let extracted = |text: &str, seed: u64| -> NewMemory {
        let mut m = memory(&t, &u, text);
        m.source.kind = SourceKind::Conversation;
        m.source.conversation_id = Some(c.clone());
        m.source.message_ids = vec![msgs[0].id];
        new_row(m, Some(unit(4, seed)))
    };
    let snapshot = || {
        let s = s.clone();
        let (t, u, c) = (t.clone(), u.clone(), c.clone());
        async move {
            let (mems, events) = s.user_memories(&t, &u).await.unwrap();
            (mems, events, s.extraction_cursor(&t, &c).await.unwrap())
        }
    };
    let before = snapshot().await;

    // Each of these batches fails on its last item: nothing of it may be applied.
    let add = extracted("The user's new hobby is pottery", 3);
    let successor = extracted("The user lives in Lyon", 4);
    let failing = [
        ExtractionBatch {
            adds: vec![add.clone()],
            supersedes: vec![(
                existing.memory.id,
                Some(successor.clone()),
                event(existing.memory.id, EventKind::Superseded, Some(successor.memory.id)),
            )],
            confirms: vec![(
                MemoryId::new(),
                event(restated.memory.id, EventKind::Confirmed, None),
            )],
            cursor: "hash-1".into(),
        },
        ExtractionBatch {
            adds: vec![add.clone()],
            supersedes: vec![(
                MemoryId::new(),
                None,
                event(existing.memory.id, EventKind::Forgotten, None),
            )],
            confirms: vec![],
            cursor: "hash-1".into(),
        },
        ExtractionBatch {
            adds: vec![add.clone(), add.clone()],
            supersedes: vec![],
            confirms: vec![],
            cursor: "hash-1".into(),
        },
        ExtractionBatch {
            adds: vec![add.clone(), new_row(memory(&t, &user("someone-else"), "x"), None)],
            supersedes: vec![],
            confirms: vec![],
            cursor: "hash-1".into(),
        },
    ];
    for (i, batch) in failing.into_iter().enumerate() {
        let r = s.apply_extraction(&t, &c, &u, batch).await;
        assert!(r.is_err(), "batch {i} should fail");
        if i < 2 {
            assert!(matches!(r, Err(Error::NotFound { .. })), "batch {i}: {r:?}");
        }
        assert_eq!(snapshot().await, before, "batch {i} left nothing behind");
    }

    // The same decisions, valid: all applied with the cursor.
    let batch = ExtractionBatch {
        adds: vec![add.clone()],
        supersedes: vec![(
            existing.memory.id,
            Some(successor.clone()),
            event(existing.memory.id, EventKind::Superseded, Some(successor.memory.id)),
        )],
        confirms: vec![(restated.memory.id, event(restated.memory.id, EventKind::Confirmed, None))],
        cursor: "hash-1".into(),
    };
    s.apply_extraction(&t, &c, &u, batch).await.unwrap();
    assert_eq!(s.get_memory(&t, add.memory.id).await.unwrap(), Some(add.memory.clone()));
    let old = s.get_memory(&t, existing.memory.id).await.unwrap().unwrap();
    assert_eq!(old.superseded_by, Some(successor.memory.id));
    assert_eq!(s.get_memory(&t, restated.memory.id).await.unwrap().unwrap().mention_count, 2);
    assert_eq!(s.extraction_cursor(&t, &c).await.unwrap().as_deref(), Some("hash-1"));
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let hits = s.vector_search(&t, &f, &unit(4, 4), 1).await.unwrap();
    assert_eq!(hits[0].0, successor.memory.id, "the successor is searchable at once");

    // A later failing batch keeps the cursor where it was.
    let bad = ExtractionBatch {
        adds: vec![extracted("another", 5)],
        supersedes: vec![(
            existing.memory.id,
            None,
            event(existing.memory.id, EventKind::Forgotten, None),
        )],
        confirms: vec![],
        cursor: "hash-2".into(),
    };
    assert!(matches!(s.apply_extraction(&t, &c, &u, bad).await, Err(Error::Conflict(_))));
    assert_eq!(s.extraction_cursor(&t, &c).await.unwrap().as_deref(), Some("hash-1"));
    // An empty batch just moves the cursor.
    s.apply_extraction(
        &t,
        &c,
        &u,
        ExtractionBatch { cursor: "hash-3".into(), ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!(s.extraction_cursor(&t, &c).await.unwrap().as_deref(), Some("hash-3"));
}
