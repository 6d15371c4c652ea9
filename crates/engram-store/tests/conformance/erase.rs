//! GDPR erasure: everything of one user in one tenant, and nothing else.

use std::sync::Arc;

use engram_core::model::{ConversationId, EventKind, Job, JobKind, MessageRole, TenantId, UserId};
use engram_core::store::{ContextSession, EraseCounts, ExtractionBatch, MemoryFilter, Store};

use crate::harness::{MODEL, event, memory, message, new_row, now, tenant, unit, user};

/// Everything a user has, as the store returns it.
#[derive(Debug, PartialEq)]
struct Snapshot {
    memories: Vec<engram_core::model::Memory>,
    events: Vec<engram_core::model::MemoryEvent>,
    messages: Vec<engram_core::model::Message>,
    jobs: Vec<String>,
    cursor: Option<String>,
    recalled: Vec<engram_core::model::MemoryId>,
    session: Option<ContextSession>,
    vector_hits: usize,
    /// Working-memory entries of every session.
    state: Vec<engram_core::model::SessionState>,
}

async fn populate(s: &Arc<dyn Store>, t: &TenantId, u: &UserId, tag: &str) {
    let a = new_row(memory(t, u, &format!("{tag} likes tea")), Some(unit(4, 1)));
    let b = new_row(memory(t, u, &format!("{tag} likes coffee")), Some(unit(4, 2)));
    s.insert_memories(t, vec![a.clone()]).await.unwrap();
    s.supersede(
        t,
        a.memory.id,
        Some(b.clone()),
        event(a.memory.id, EventKind::Superseded, Some(b.memory.id)),
    )
    .await
    .unwrap();
    let conv = format!("conv-{tag}");
    s.append_messages(
        t,
        vec![
            message(t, u, &conv, MessageRole::User, "I switched to coffee"),
            message(t, u, &conv, MessageRole::Assistant, "Noted"),
        ],
    )
    .await
    .unwrap();
    let c = ConversationId::parse(conv.clone()).unwrap();
    let batch = ExtractionBatch { cursor: format!("hash-{tag}"), ..Default::default() };
    s.apply_extraction(t, &c, u, batch).await.unwrap();
    let mut job = Job::new(
        t.clone(),
        Some(u.clone()),
        JobKind::Extract,
        serde_json::json!({"conversation": conv}),
    );
    job.dedup_key = Some(format!("extract:{conv}"));
    s.enqueue_job(&job).await.unwrap();
    s.record_recall(t, &format!("turn-{tag}"), &[b.memory.id]).await.unwrap();
    let session = ContextSession {
        session_id: format!("sess-{tag}"),
        user_id: u.clone(),
        pool: None,
        text: "facts".into(),
        memory_ids: vec![b.memory.id],
        created_at: now(),
        params: None,
    };
    s.put_context_session(t, &session).await.unwrap();
    let state = engram_core::model::SessionState {
        tenant_id: t.clone(),
        user_id: u.clone(),
        agent_id: None,
        session_id: engram_core::model::SessionId::parse(format!("run-{tag}")).unwrap(),
        key: engram_core::model::StateKey::parse("plan").unwrap(),
        value: serde_json::json!({ "tag": tag }),
        expires_at: now() + time::Duration::hours(1),
        created_at: now(),
        updated_at: now(),
    };
    s.put_state(&state).await.unwrap();
}

async fn snapshot(s: &Arc<dyn Store>, t: &TenantId, u: &UserId, tag: &str) -> Snapshot {
    let (memories, events) = s.user_memories(t, u).await.unwrap();
    let messages = s.user_messages(t, u).await.unwrap();
    let jobs = s
        .list_jobs(Some(t), None, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|j| j.user_id.as_ref() == Some(u))
        .map(|j| j.id)
        .collect();
    let c = ConversationId::parse(format!("conv-{tag}")).unwrap();
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    Snapshot {
        memories,
        events,
        messages,
        jobs,
        cursor: s.extraction_cursor(t, &c).await.unwrap(),
        recalled: s.recalled(t, &format!("turn-{tag}")).await.unwrap(),
        session: s.get_context_session(t, &format!("sess-{tag}"), u, None).await.unwrap(),
        vector_hits: s.vector_search(t, &f, &unit(4, 2), 10).await.unwrap().len(),
        state: s.list_state(t, u, None, now()).await.unwrap(),
    }
}

pub async fn erase_user_removes_only_that_user(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let (u1, u2) = (user("u1"), user("u2"));
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    populate(&s, &t, &u1, "a").await;
    populate(&s, &t, &u2, "b").await;
    populate(&s, &t2, &u1, "c").await;
    let before_u1 = snapshot(&s, &t, &u1, "a").await;
    let before_u2 = snapshot(&s, &t, &u2, "b").await;
    let before_other = snapshot(&s, &t2, &u1, "c").await;
    assert_eq!(before_u1.vector_hits, 1);
    assert!(
        before_u1.cursor.is_some()
            && before_u1.session.is_some()
            && !before_u1.recalled.is_empty()
            && before_u1.state.len() == 1
    );

    let counts = s.erase_user(&t, &u1).await.unwrap();
    assert_eq!(
        counts,
        EraseCounts {
            memories: before_u1.memories.len() as u64,
            memory_events: before_u1.events.len() as u64,
            messages: before_u1.messages.len() as u64,
            conversations: 1,
            summaries: 0,
            jobs: before_u1.jobs.len() as u64,
            cursors: 1,
            recalls: 1,
            context_sessions: 1,
            session_state: 1,
        }
    );
    assert_eq!((counts.memories, counts.memory_events, counts.messages, counts.jobs), (2, 3, 2, 1));

    let after = snapshot(&s, &t, &u1, "a").await;
    assert_eq!(
        after,
        Snapshot {
            memories: vec![],
            events: vec![],
            messages: vec![],
            jobs: vec![],
            cursor: None,
            recalled: vec![],
            session: None,
            vector_hits: 0,
            state: vec![],
        }
    );
    let c = ConversationId::parse("conv-a").unwrap();
    assert!(s.conversation_owner(&t, &c).await.unwrap().is_none());
    assert_eq!(s.list_users(&t).await.unwrap(), vec![u2.clone()]);
    assert_eq!(snapshot(&s, &t, &u2, "b").await, before_u2);
    assert_eq!(snapshot(&s, &t2, &u1, "c").await, before_other);

    // Nothing left to erase; and the user can start over (searches see the new rows).
    assert_eq!(s.erase_user(&t, &u1).await.unwrap(), EraseCounts::default());
    let fresh = new_row(memory(&t, &u1, "new start"), Some(unit(4, 2)));
    s.insert_memories(&t, vec![fresh.clone()]).await.unwrap();
    let f = MemoryFilter { user_id: Some(u1.clone()), ..Default::default() };
    let hits = s.vector_search(&t, &f, &unit(4, 2), 10).await.unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![fresh.memory.id]);
}

/// A second process searching the same user sees an erasure, and only the user's new facts
/// after it, even when the new writes bring the user's change counter back to where the
/// other process's cache was.
pub async fn erasure_then_new_facts_seen_by_another_process(
    s: Arc<dyn Store>,
    other: Arc<dyn Store>,
) {
    let t = tenant("acme");
    let u = user("phoenix");
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    for seed in 1..=3 {
        s.insert_memories(
            &t,
            vec![new_row(memory(&t, &u, &format!("old fact {seed}")), Some(unit(4, seed)))],
        )
        .await
        .unwrap();
    }
    assert_eq!(other.vector_search(&t, &f, &unit(4, 1), 10).await.unwrap().len(), 3);
    s.erase_user(&t, &u).await.unwrap();
    let mut new_ids = Vec::new();
    for seed in 4..=6 {
        let row = new_row(memory(&t, &u, &format!("new fact {seed}")), Some(unit(4, seed)));
        new_ids.push(row.memory.id);
        s.insert_memories(&t, vec![row]).await.unwrap();
    }
    let mut got: Vec<_> = other
        .vector_search(&t, &f, &unit(4, 1), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.0)
        .collect();
    got.sort();
    new_ids.sort();
    assert_eq!(got, new_ids, "the other process must drop the erased facts and see the new ones");
    let _ = now();
}
