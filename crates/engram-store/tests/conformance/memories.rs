//! Memories: tenancy, supersession, listing, counters, vectors bookkeeping.

use std::collections::BTreeSet;
use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{
    Agent, AgentId, Category, ConversationId, EventKind, Importance, Job, JobKind, Kind,
    MemoryEvent, MemoryId, MessageRole,
};
use engram_core::store::{ContextSession, ExtractionBatch, MemoryFilter, Store, TranscriptFilter};
use time::Duration;

use crate::harness::{MODEL, event, memory, message, new_row, now, tenant, unit, user};

fn is_not_found<T: std::fmt::Debug>(r: &engram_core::Result<T>) -> bool {
    matches!(r, Err(Error::NotFound { .. }))
}

pub async fn tenant_isolation(s: Arc<dyn Store>) {
    let (t1, t2) = (tenant("t1"), tenant("t2"));
    let u = user("alice");
    s.ensure_embedding_space(MODEL, 8).await.unwrap();
    let a = new_row(memory(&t1, &u, "Alice drinks green tea"), Some(unit(8, 1)));
    let b = new_row(memory(&t2, &u, "Alice drinks black coffee"), Some(unit(8, 2)));
    let mut p = memory(&t1, &u, "Europe/Berlin");
    p.kind = Kind::Profile;
    p.key = Some("timezone".into());
    let p = new_row(p, None);
    s.insert_memories(&t1, vec![a.clone(), p.clone()]).await.unwrap();
    s.insert_memories(&t2, vec![b.clone()]).await.unwrap();
    let (a, b) = (a.memory, b.memory);

    // Reads by id: another tenant's id is an unknown id.
    assert_eq!(s.get_memory(&t1, a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(s.get_memory(&t2, a.id).await.unwrap(), None);
    assert!(s.get_memories(&t2, &[a.id]).await.unwrap().is_empty());
    assert!(is_not_found(&s.history(&t2, a.id).await));
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let l2 = s.list_memories(&t2, &all, None, 100).await.unwrap();
    assert_eq!(l2.memories.iter().map(|m| m.id).collect::<Vec<_>>(), vec![b.id]);
    let aa = s.all_active(&t2, &all).await.unwrap();
    assert_eq!(aa.iter().map(|m| m.id).collect::<Vec<_>>(), vec![b.id]);
    let hits = s.vector_search(&t2, &all, &unit(8, 1), 10).await.unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![b.id]);
    assert!(s.text_search(&t2, &all, "tea", 10).await.unwrap().is_empty());
    assert_eq!(s.text_search(&t1, &all, "tea", 10).await.unwrap()[0].0, a.id);
    assert!(s.find_profile(&t2, &u, None, "timezone").await.unwrap().is_none());
    assert_eq!(
        s.find_profile(&t1, &u, None, "timezone").await.unwrap().map(|m| m.id),
        Some(p.memory.id)
    );
    let (mems, events) = s.user_memories(&t2, &u).await.unwrap();
    assert_eq!(mems.iter().map(|m| m.id).collect::<Vec<_>>(), vec![b.id]);
    assert!(events.iter().all(|e| e.memory_id == b.id));

    // Writes through another tenant: NotFound, and nothing changes.
    let ev = event(a.id, EventKind::Forgotten, None);
    assert!(is_not_found(&s.supersede(&t2, a.id, None, ev.clone()).await));
    assert!(is_not_found(&s.confirm_memory(&t2, a.id, ev.clone()).await));
    assert!(is_not_found(&s.rate_memory(&t2, a.id, 1, ev.clone()).await));
    assert!(is_not_found(&s.purge_memory(&t2, a.id).await));
    s.touch_memories(&t2, &[a.id], now()).await.unwrap();
    s.record_recall(&t2, "turn-1", &[a.id]).await.unwrap();
    assert!(s.recalled(&t2, "turn-1").await.unwrap().is_empty());
    assert!(s.recalled(&t1, "turn-1").await.unwrap().is_empty());
    s.set_vectors(&t2, MODEL, vec![(a.id, unit(8, 9))]).await.unwrap();
    assert_eq!(s.get_memory(&t1, a.id).await.unwrap(), Some(a.clone()));
    let hits = s.vector_search(&t1, &all, &unit(8, 1), 1).await.unwrap();
    assert!((hits[0].1 - 1.0).abs() < 1e-5, "a's vector was not changed through t2");

    // Conversations are per tenant: the same id in two tenants is two conversations.
    let m1 = message(&t1, &u, "c1", MessageRole::User, "hiking in the alps");
    let u2 = user("bob");
    let m2 = message(&t2, &u2, "c1", MessageRole::User, "sailing on the lake");
    s.append_messages(&t1, vec![m1.clone()]).await.unwrap();
    s.append_messages(&t2, vec![m2.clone()]).await.unwrap();
    let c1 = ConversationId::parse("c1").unwrap();
    assert_eq!(s.conversation_owner(&t1, &c1).await.unwrap(), Some((u.clone(), None)));
    assert_eq!(s.conversation_owner(&t2, &c1).await.unwrap(), Some((u2.clone(), None)));
    assert!(s.get_message(&t2, m1.id).await.unwrap().is_none());
    assert!(is_not_found(&s.rate_message(&t2, m1.id, 1).await));
    let l = s.list_messages(&t2, &c1, 0, 100).await.unwrap();
    assert_eq!(l.iter().map(|m| m.id).collect::<Vec<_>>(), vec![m2.id]);
    assert!(
        s.text_search_messages(&t2, &TranscriptFilter::user(u.clone()), "hiking", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.text_search_messages(&t2, &TranscriptFilter::user(u2.clone()), "hiking", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.text_search_messages(&t1, &TranscriptFilter::user(u.clone()), "hiking", 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(!s.set_message_content(&t2, m1.id, "x").await.unwrap());

    // Agents, sessions, jobs, cursors.
    let at = now();
    let agent = Agent {
        tenant_id: t1.clone(),
        id: AgentId::parse("helper").unwrap(),
        memory_enabled: true,
        cluster_id: None,
        dedup_threshold: 0.9,
        settings: serde_json::json!({}),
        created_at: at,
        updated_at: at,
    };
    s.put_agent(&agent).await.unwrap();
    assert!(s.get_agent(&t2, &agent.id).await.unwrap().is_none());
    let session = ContextSession {
        session_id: "s1".into(),
        user_id: u.clone(),
        pool: None,
        text: "Known facts".into(),
        memory_ids: vec![a.id],
        created_at: at,
        params: None,
    };
    s.put_context_session(&t1, &session).await.unwrap();
    assert!(s.get_context_session(&t2, "s1", &u, None).await.unwrap().is_none());
    let job = Job::new(t1.clone(), Some(u.clone()), JobKind::Extract, serde_json::json!({}));
    s.enqueue_job(&job).await.unwrap();
    assert!(s.list_jobs(Some(&t2), None, 100).await.unwrap().is_empty());
    assert_eq!(s.list_jobs(Some(&t1), None, 100).await.unwrap().len(), 1);
    assert!(is_not_found(&s.retry_job(Some(&t2), &job.id).await));
    let batch = ExtractionBatch { cursor: "h1".into(), ..Default::default() };
    s.apply_extraction(&t1, &c1, &u, batch).await.unwrap();
    assert_eq!(s.extraction_cursor(&t1, &c1).await.unwrap().as_deref(), Some("h1"));
    assert_eq!(s.extraction_cursor(&t2, &c1).await.unwrap(), None);
    s.set_rolling_summary(&t1, &c1, "summary", 3).await.unwrap();
    assert_eq!(s.rolling_summary(&t2, &c1).await.unwrap(), (None, 0));

    // Listings and counters.
    assert_eq!(s.list_users(&t2).await.unwrap(), vec![u.clone(), u2.clone()]);
    assert_eq!(s.list_users(&t1).await.unwrap(), vec![u.clone()]);
    assert_eq!(s.list_tenants().await.unwrap(), vec![t1.clone(), t2.clone()]);
    let st2 = s.stats(&t2).await.unwrap();
    assert_eq!(
        (st2.memories_active, st2.messages, st2.conversations, st2.jobs_pending),
        (1, 1, 1, 0)
    );
    let st1 = s.stats(&t1).await.unwrap();
    assert_eq!((st1.memories_active, st1.messages, st1.jobs_pending), (2, 1, 1));
}

/// Events of one instant come back in the order they were written, on both backends (a
/// timeline would otherwise show "rated" before "created").
pub async fn history_keeps_the_order_of_one_instant(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let mut row = new_row(memory(&t, &u, "The user likes tea"), None);
    let at = row.events[0].at;
    let kinds = [EventKind::Created, EventKind::Rated, EventKind::Confirmed, EventKind::Rated];
    row.events =
        kinds.iter().map(|k| MemoryEvent { at, ..event(row.memory.id, *k, None) }).collect();
    s.insert_memories(&t, vec![row.clone()]).await.unwrap();
    let (_, evs) = s.history(&t, row.memory.id).await.unwrap();
    assert_eq!(evs.iter().map(|e| e.event).collect::<Vec<_>>(), kinds);
}

pub async fn supersede_forget_purge_history(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let a = new_row(memory(&t, &u, "The user lives in Paris"), Some(unit(4, 1)));
    s.insert_memories(&t, vec![a.clone()]).await.unwrap();
    let a = a.memory;

    // Edit: A -> B -> C, then forget C.
    let mut chain = vec![a.clone()];
    for (i, text) in ["The user lives in Lyon", "The user lives in Nice"].iter().enumerate() {
        let prev = chain.last().unwrap().id;
        let mut n = memory(&t, &u, text);
        n.category = Category::Fact;
        let mut row = new_row(n, Some(unit(4, 10 + i as u64)));
        row.events = vec![event(row.memory.id, EventKind::Created, Some(prev))];
        s.supersede(
            &t,
            prev,
            Some(row.clone()),
            event(prev, EventKind::Superseded, Some(row.memory.id)),
        )
        .await
        .unwrap();
        chain.push(row.memory);
    }
    let (b, c) = (chain[1].clone(), chain[2].clone());
    s.supersede(&t, c.id, None, event(c.id, EventKind::Forgotten, None)).await.unwrap();

    let got_a = s.get_memory(&t, a.id).await.unwrap().unwrap();
    assert_eq!(got_a.superseded_by, Some(b.id));
    assert!(got_a.superseded_at.is_some());
    assert_eq!(
        (got_a.content.as_str(), got_a.category),
        (a.content.as_str(), a.category),
        "never overwritten"
    );
    let got_c = s.get_memory(&t, c.id).await.unwrap().unwrap();
    assert!(got_c.superseded_at.is_some() && got_c.superseded_by.is_none());

    // Already superseded: Conflict; unknown: NotFound.
    let r = s.supersede(&t, a.id, None, event(a.id, EventKind::Forgotten, None)).await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    let r = s.supersede(&t, MemoryId::new(), None, event(a.id, EventKind::Forgotten, None)).await;
    assert!(is_not_found(&r));

    for start in [a.id, b.id, c.id] {
        let (ms, evs) = s.history(&t, start).await.unwrap();
        assert_eq!(ms.iter().map(|m| m.id).collect::<Vec<_>>(), vec![a.id, b.id, c.id]);
        let kinds: Vec<EventKind> = evs.iter().map(|e| e.event).collect();
        assert_eq!(kinds.iter().filter(|k| **k == EventKind::Created).count(), 3);
        assert_eq!(kinds.iter().filter(|k| **k == EventKind::Superseded).count(), 2);
        assert_eq!(kinds.iter().filter(|k| **k == EventKind::Forgotten).count(), 1);
        assert!(evs.windows(2).all(|w| w[0].at <= w[1].at), "events oldest first");
    }

    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    assert!(s.list_memories(&t, &all, None, 10).await.unwrap().memories.is_empty());
    let with = MemoryFilter { include_superseded: true, ..all.clone() };
    assert_eq!(s.list_memories(&t, &with, None, 10).await.unwrap().memories.len(), 3);
    assert!(s.vector_search(&t, &all, &unit(4, 1), 10).await.unwrap().is_empty());

    // Purge the middle row: its events go, links to it are cleared, the others stay.
    s.purge_memory(&t, b.id).await.unwrap();
    assert!(s.get_memory(&t, b.id).await.unwrap().is_none());
    assert!(is_not_found(&s.purge_memory(&t, b.id).await));
    assert!(is_not_found(&s.history(&t, b.id).await));
    let (ms, _) = s.history(&t, a.id).await.unwrap();
    assert_eq!(ms.iter().map(|m| m.id).collect::<Vec<_>>(), vec![a.id]);
    assert_eq!(s.get_memory(&t, a.id).await.unwrap().unwrap().superseded_by, None);
    let (ms, _) = s.history(&t, c.id).await.unwrap();
    assert_eq!(ms.iter().map(|m| m.id).collect::<Vec<_>>(), vec![c.id]);
    let (_, evs) = s.user_memories(&t, &u).await.unwrap();
    assert!(evs.iter().all(|e| e.memory_id != b.id));
    assert_eq!(evs.len(), 4, "A: created + superseded; C: created + forgotten");
}

pub async fn list_pagination_and_filters(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let base = now() - Duration::days(10);
    let pools = [Some("agent:a"), Some("agent:b"), None];
    let mut rows = Vec::new();
    for i in 0..30i64 {
        let mut m = memory(&t, &u, &format!("fact number {i}"));
        m.pool = pools[(i % 3) as usize].map(str::to_string);
        m.agent_id =
            m.pool.as_ref().map(|p| AgentId::parse(p.trim_start_matches("agent:")).unwrap());
        m.kind = if i % 5 == 0 { Kind::Shared } else { Kind::Knowledge };
        m.category = Category::ALL[(i % 6) as usize];
        m.importance = Importance::parse(1 + i % 10).unwrap();
        m.observed_at = base + Duration::hours(i);
        rows.push(new_row(m, None));
    }
    // Noise: another user, an expired row and a forgotten row of this user.
    rows.push(new_row(memory(&t, &user("other"), "fact of someone else"), None));
    let mut expired = memory(&t, &u, "expired fact");
    expired.expires_at = Some(now() - Duration::minutes(1));
    rows.push(new_row(expired.clone(), None));
    let forgotten = memory(&t, &u, "forgotten fact");
    rows.push(new_row(forgotten.clone(), None));
    s.insert_memories(&t, rows.clone()).await.unwrap();
    s.supersede(&t, forgotten.id, None, event(forgotten.id, EventKind::Forgotten, None))
        .await
        .unwrap();
    let active: Vec<_> = rows[..30].iter().map(|r| r.memory.clone()).collect();

    // Pages: newest id first, no duplicates, cursor None on the last page.
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let mut seen = Vec::new();
    let mut cursor = None;
    let mut pages = 0;
    loop {
        let page = s.list_memories(&t, &all, cursor, 7).await.unwrap();
        assert!(page.memories.len() <= 7);
        pages += 1;
        seen.extend(page.memories.iter().map(|m| m.id));
        match page.next_cursor {
            Some(c) => {
                assert_eq!(Some(c), page.memories.last().map(|m| m.id));
                cursor = Some(c);
            }
            None => break,
        }
        assert!(pages < 10, "pagination does not end");
    }
    let mut want: Vec<MemoryId> = active.iter().map(|m| m.id).collect();
    want.sort();
    want.reverse();
    assert_eq!(seen, want);
    assert_eq!(pages, 5);
    let exact = s.list_memories(&t, &all, None, 30).await.unwrap();
    assert_eq!((exact.memories.len(), exact.next_cursor), (30, None));
    let first = s.list_memories(&t, &all, None, 1).await.unwrap();
    assert_eq!(first.memories[0], active.iter().find(|m| m.id == want[0]).unwrap().clone());

    // Filters.
    let ids = |f: &MemoryFilter| {
        let s = s.clone();
        let f = f.clone();
        let t = t.clone();
        async move {
            let p = s.list_memories(&t, &f, None, 1000).await.unwrap();
            p.memories.iter().map(|m| m.id).collect::<BTreeSet<_>>()
        }
    };
    let expect = |pred: &dyn Fn(&engram_core::model::Memory) -> bool| {
        active.iter().filter(|m| pred(m)).map(|m| m.id).collect::<BTreeSet<_>>()
    };
    let f = MemoryFilter { pool: Some("agent:a".into()), ..all.clone() };
    assert_eq!(
        ids(&f).await,
        expect(&|m| m.pool.as_deref() == Some("agent:a")
            || m.pool.is_none()
            || m.kind == Kind::Shared)
    );
    let f = MemoryFilter { categories: Some(vec![Category::Fact, Category::Event]), ..all.clone() };
    assert_eq!(ids(&f).await, expect(&|m| matches!(m.category, Category::Fact | Category::Event)));
    let f = MemoryFilter { kinds: Some(vec![Kind::Shared]), ..all.clone() };
    assert_eq!(ids(&f).await, expect(&|m| m.kind == Kind::Shared));
    let (since, until) = (base + Duration::hours(5), base + Duration::hours(10));
    let f = MemoryFilter { since: Some(since), until: Some(until), ..all.clone() };
    assert_eq!(ids(&f).await, expect(&|m| m.observed_at >= since && m.observed_at < until));
    assert_eq!(ids(&f).await.len(), 5);
    let f = MemoryFilter { include_superseded: true, ..all.clone() };
    let mut with = expect(&|_| true);
    with.insert(expired.id);
    with.insert(forgotten.id);
    assert_eq!(ids(&f).await, with);
    let f = MemoryFilter { user_id: None, ..all.clone() };
    assert_eq!(ids(&f).await.len(), 31, "no user filter: every user of the tenant");
    let f = MemoryFilter {
        pool: Some("agent:b".into()),
        kinds: Some(vec![Kind::Knowledge]),
        categories: Some(vec![Category::Preference, Category::Fact, Category::General]),
        ..all.clone()
    };
    assert_eq!(
        ids(&f).await,
        expect(&|m| (m.pool.as_deref() == Some("agent:b") || m.pool.is_none())
            && m.kind == Kind::Knowledge
            && matches!(m.category, Category::Preference | Category::Fact | Category::General))
    );

    // all_active: oldest observation first, never superseded or expired.
    let f = MemoryFilter { include_superseded: true, ..all.clone() };
    let got = s.all_active(&t, &f).await.unwrap();
    let mut want = active.clone();
    want.sort_by_key(|m| (m.observed_at, m.id));
    assert_eq!(got, want);
}

pub async fn profile_touch_rate(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let profile = |pool: Option<&str>, value: &str| {
        let mut m = memory(&t, &u, value);
        m.kind = Kind::Profile;
        m.key = Some("timezone".into());
        m.pool = pool.map(str::to_string);
        new_row(m, None)
    };
    let p1 = profile(None, "Europe/Paris");
    let p2 = profile(Some("agent:a"), "Asia/Tokyo");
    s.insert_memories(&t, vec![p1.clone(), p2.clone()]).await.unwrap();
    assert_eq!(s.find_profile(&t, &u, None, "timezone").await.unwrap(), Some(p1.memory.clone()));
    assert_eq!(
        s.find_profile(&t, &u, Some("agent:a"), "timezone").await.unwrap().map(|m| m.id),
        Some(p2.memory.id)
    );
    assert!(s.find_profile(&t, &u, Some("agent:b"), "timezone").await.unwrap().is_none());
    assert!(s.find_profile(&t, &u, None, "name").await.unwrap().is_none());
    assert!(s.find_profile(&t, &user("v"), None, "timezone").await.unwrap().is_none());
    // Upsert by key = supersede; the old one is no longer found.
    let p3 = profile(None, "America/New_York");
    s.supersede(
        &t,
        p1.memory.id,
        Some(p3.clone()),
        event(p1.memory.id, EventKind::Superseded, Some(p3.memory.id)),
    )
    .await
    .unwrap();
    assert_eq!(
        s.find_profile(&t, &u, None, "timezone").await.unwrap().map(|m| m.id),
        Some(p3.memory.id)
    );

    // touch: once per call and id, duplicates in the list count once.
    let k = new_row(memory(&t, &u, "knowledge"), None);
    s.insert_memories(&t, vec![k.clone()]).await.unwrap();
    let at = now();
    s.touch_memories(&t, &[k.memory.id, k.memory.id, MemoryId::new()], at).await.unwrap();
    s.touch_memories(&t, &[], at).await.unwrap();
    let got = s.get_memory(&t, k.memory.id).await.unwrap().unwrap();
    assert_eq!((got.access_count, got.last_accessed_at), (1, Some(at)));

    // rate: returns the new sum, records the event; unknown: NotFound.
    assert_eq!(
        s.rate_memory(&t, k.memory.id, 1, event(k.memory.id, EventKind::Rated, None))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        s.rate_memory(&t, k.memory.id, -1, event(k.memory.id, EventKind::Rated, None))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        s.rate_memory(&t, k.memory.id, -1, event(k.memory.id, EventKind::Rated, None))
            .await
            .unwrap(),
        -1
    );
    assert!(is_not_found(
        &s.rate_memory(&t, MemoryId::new(), 1, event(k.memory.id, EventKind::Rated, None)).await
    ));
    let (_, evs) = s.history(&t, k.memory.id).await.unwrap();
    assert_eq!(evs.iter().filter(|e| e.event == EventKind::Rated).count(), 3);

    // confirm: updated_at and mention_count move, content does not.
    let at = now() + Duration::seconds(5);
    let mut ev = event(k.memory.id, EventKind::Confirmed, None);
    ev.at = at;
    s.confirm_memory(&t, k.memory.id, ev).await.unwrap();
    let got = s.get_memory(&t, k.memory.id).await.unwrap().unwrap();
    assert_eq!((got.mention_count, got.updated_at, got.content.as_str()), (2, at, "knowledge"));
    assert!(is_not_found(
        &s.confirm_memory(&t, MemoryId::new(), event(k.memory.id, EventKind::Confirmed, None))
            .await
    ));
}

pub async fn rows_needing_vectors_and_set_vectors(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let with = new_row(memory(&t, &u, "has a vector"), Some(unit(4, 1)));
    let without = new_row(memory(&t, &u, "has no vector"), None);
    let mut old = new_row(memory(&t, &u, "old model"), Some(unit(4, 2)));
    old.memory.embedding_model = Some("old-model".into());
    let mut prof = memory(&t, &u, "Berlin");
    prof.kind = Kind::Profile;
    prof.key = Some("city".into());
    let prof = new_row(prof, None);
    s.insert_memories(&t, vec![with.clone(), without.clone(), old.clone(), prof]).await.unwrap();

    let need = s.rows_needing_vectors(&t, MODEL, 100).await.unwrap();
    let mut want = vec![
        (without.memory.id, "has no vector".to_string()),
        (old.memory.id, "old model".to_string()),
    ];
    want.sort();
    assert_eq!(need, want, "ordered by id; profile facts never need one");
    assert_eq!(s.rows_needing_vectors(&t, MODEL, 1).await.unwrap(), want[..1].to_vec());
    assert!(s.rows_needing_vectors(&tenant("other"), MODEL, 100).await.unwrap().is_empty());
    assert_eq!(s.rows_needing_vectors(&t, "new-model", 100).await.unwrap().len(), 3);

    s.set_vectors(
        &t,
        MODEL,
        vec![
            (without.memory.id, unit(4, 3)),
            (old.memory.id, unit(4, 4)),
            (MemoryId::new(), unit(4, 5)),
        ],
    )
    .await
    .unwrap();
    assert!(s.rows_needing_vectors(&t, MODEL, 100).await.unwrap().is_empty());
    let got = s.get_memory(&t, old.memory.id).await.unwrap().unwrap();
    assert_eq!(got.embedding_model.as_deref(), Some(MODEL));
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let hits = s.vector_search(&t, &f, &unit(4, 3), 1).await.unwrap();
    assert_eq!(hits[0].0, without.memory.id, "the new vector is searched");
    assert!((hits[0].1 - 1.0).abs() < 1e-5);
    assert_eq!(s.stats(&t).await.unwrap().memories_with_vector, 4);
}

pub async fn dimension_refusal(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    assert_eq!(s.embedding_space().await.unwrap(), None);
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    assert_eq!(s.embedding_space().await.unwrap(), Some((MODEL.to_string(), 4)));
    assert!(matches!(s.ensure_embedding_space(MODEL, 8).await, Err(Error::Unprocessable(_))));
    assert!(matches!(s.ensure_embedding_space("other", 4).await, Err(Error::Unprocessable(_))));
    let ok = new_row(memory(&t, &u, "four"), Some(unit(4, 1)));
    let bad = new_row(memory(&t, &u, "eight"), Some(unit(8, 1)));
    let r = s.insert_memories(&t, vec![ok.clone(), bad]).await;
    assert!(matches!(r, Err(Error::Unprocessable(_))), "{r:?}");
    assert!(
        s.get_memory(&t, ok.memory.id).await.unwrap().is_none(),
        "nothing of the batch is stored"
    );
    s.insert_memories(&t, vec![ok.clone()]).await.unwrap();
    let st = s.stats(&t).await.unwrap();
    assert_eq!((st.embedding_model.as_deref(), st.embedding_dims), (Some(MODEL), Some(4)));

    // A re-embed moves the store to another space.
    s.set_vectors(&t, "model-2", vec![(ok.memory.id, unit(6, 1))]).await.unwrap();
    s.reset_embedding_space("model-2", 6).await.unwrap();
    assert_eq!(s.embedding_space().await.unwrap(), Some(("model-2".to_string(), 6)));
    s.ensure_embedding_space("model-2", 6).await.unwrap();
    assert!(matches!(s.ensure_embedding_space(MODEL, 4).await, Err(Error::Unprocessable(_))));
    let six = new_row(memory(&t, &u, "six"), Some(unit(6, 2)));
    s.insert_memories(&t, vec![six]).await.unwrap();
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let hits = s.vector_search(&t, &f, &unit(6, 1), 10).await.unwrap();
    assert_eq!(hits.len(), 2);
    assert_eq!(hits[0].0, ok.memory.id);
}

pub async fn round_trip_and_unknown_ids(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let mut m = memory(
        &t,
        &u,
        "Ünïcödé — \"quotes\", 'apostrophes', back\\slash, emoji 🙂, tab\tand newline\n.",
    );
    m.agent_id = Some(AgentId::parse("agent one").unwrap());
    m.pool = Some("cluster:x".into());
    m.category = Category::Relationship;
    m.importance = Importance::parse(9).unwrap();
    m.source.kind = engram_core::model::SourceKind::Conversation;
    m.source.conversation_id = Some(ConversationId::parse("conv/1").unwrap());
    m.source.message_ids =
        vec![engram_core::model::MessageId::new(), engram_core::model::MessageId::new()];
    m.observed_at = now() - Duration::days(400);
    m.expires_at = Some(now() + Duration::days(30));
    m.metadata = serde_json::json!({"n": 1, "f": 1.5, "neg": -3, "s": "x", "list": [1, "a", null, true], "nested": {"k": {"deep": []}}});
    let row = new_row(m.clone(), None);
    s.insert_memories(&t, vec![row.clone()]).await.unwrap();
    assert_eq!(s.get_memory(&t, m.id).await.unwrap(), Some(row.memory.clone()));
    let got = s.get_memories(&t, &[m.id, MemoryId::new(), m.id]).await.unwrap();
    assert!(!got.is_empty() && got.iter().all(|g| *g == row.memory));
    let (ms, evs) = s.user_memories(&t, &u).await.unwrap();
    assert_eq!(ms, vec![row.memory.clone()]);
    assert_eq!(evs, row.events);

    // Inserting the same id again is a Conflict, and nothing of that batch is stored.
    let fresh = new_row(memory(&t, &u, "fresh"), None);
    let r = s.insert_memories(&t, vec![fresh.clone(), row.clone()]).await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    assert!(s.get_memory(&t, fresh.memory.id).await.unwrap().is_none());

    // Unknown ids.
    let unknown = MemoryId::new();
    assert!(s.get_memory(&t, unknown).await.unwrap().is_none());
    assert!(s.get_memories(&t, &[]).await.unwrap().is_empty());
    assert!(is_not_found(&s.history(&t, unknown).await));
    assert!(is_not_found(&s.purge_memory(&t, unknown).await));
    assert!(s.insert_memories(&t, vec![]).await.is_ok());

    // Timestamps are kept to the microsecond on every backend.
    let mut fine = memory(&t, &u, "stamped to the nanosecond");
    fine.observed_at = fine.observed_at.replace_nanosecond(123_456_789).unwrap();
    s.insert_memories(&t, vec![new_row(fine.clone(), None)]).await.unwrap();
    let back = s.get_memory(&t, fine.id).await.unwrap().unwrap();
    assert_eq!(back.observed_at, fine.observed_at.replace_nanosecond(123_456_000).unwrap());
    assert!(s.get_message(&t, engram_core::model::MessageId::new()).await.unwrap().is_none());
    assert!(
        s.conversation_owner(&t, &ConversationId::parse("nope").unwrap()).await.unwrap().is_none()
    );
    assert_eq!(
        s.rolling_summary(&t, &ConversationId::parse("nope").unwrap()).await.unwrap(),
        (None, 0)
    );
    assert!(s.recalled(&t, "no-turn").await.unwrap().is_empty());
    assert!(s.list_users(&tenant("empty")).await.unwrap().is_empty());
    let st = s.stats(&tenant("empty")).await.unwrap();
    assert_eq!(st.memories_active, 0);
}

/// Filters by source conversation and rating sign; the activity behind the charts:
/// categories, rows per day, and the extraction's decisions (events by `system`).
pub async fn source_rating_filters_and_activity(s: Arc<dyn Store>) {
    let t = tenant("t");
    let (u, u2) = (user("u"), user("u2"));
    let conv = ConversationId::parse("c-1").unwrap();
    let mut from_conv = memory(&t, &u, "The user moved to Lyon");
    from_conv.source.conversation_id = Some(conv.clone());
    from_conv.category = Category::Fact;
    let mut liked = memory(&t, &u, "The user likes tea");
    liked.rating = 2;
    let mut disliked = memory(&t, &u2, "The user hates rain");
    disliked.rating = -1;
    let rows = [&from_conv, &liked, &disliked].map(|m| {
        let mut r = new_row(m.clone(), None);
        r.events[0].actor = engram_core::model::actor_name_system();
        r
    });
    s.insert_memories(&t, rows.to_vec()).await.unwrap();
    // A manual edit is not a decision of the extraction.
    let edited = new_row(memory(&t, &u, "The user likes green tea"), None);
    s.supersede(&t, liked.id, Some(edited), event(liked.id, EventKind::Superseded, None))
        .await
        .unwrap();
    let ids = |f: MemoryFilter| {
        let s = s.clone();
        let t = t.clone();
        async move {
            let page = s.list_memories(&t, &f, None, 10).await.unwrap();
            page.memories.into_iter().map(|m| m.content).collect::<Vec<_>>()
        }
    };
    let by_conv = MemoryFilter { source_conversation: Some(conv.clone()), ..Default::default() };
    assert_eq!(ids(by_conv).await, ["The user moved to Lyon"]);
    let up = MemoryFilter {
        rating: Some(std::cmp::Ordering::Greater),
        include_superseded: true,
        ..Default::default()
    };
    assert_eq!(ids(up).await, ["The user likes tea"]);
    let down = MemoryFilter { rating: Some(std::cmp::Ordering::Less), ..Default::default() };
    assert_eq!(ids(down).await, ["The user hates rain"]);
    let even = MemoryFilter { rating: Some(std::cmp::Ordering::Equal), ..Default::default() };
    assert_eq!(ids(even).await.len(), 2);

    let since = now() - Duration::days(1);
    let a = s.activity(&t, None, since).await.unwrap();
    let general = a.categories.iter().find(|c| c.0 == Category::General).map(|c| c.1);
    assert_eq!((general, a.categories.iter().map(|c| c.1).sum::<u64>()), (Some(2), 3));
    let today = now().unix_timestamp().div_euclid(86_400);
    assert_eq!(a.memories_per_day, [(today, 4)]);
    assert_eq!(a.decisions, [(EventKind::Created, 3)], "the manual edit is not counted");
    let one = s.activity(&t, Some(&u2), since).await.unwrap();
    assert_eq!(
        (one.memories_per_day.clone(), one.decisions.clone()),
        (vec![(today, 1)], vec![(EventKind::Created, 1)])
    );
    let later = s.activity(&t, None, now() + Duration::days(1)).await.unwrap();
    assert!(later.memories_per_day.is_empty() && later.decisions.is_empty());
}
