//! Conversations and messages, recalls, context sessions, agents, API keys.

use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{
    Agent, AgentId, ConversationId, Job, JobStatus, KeyRole, MemoryId, MessageId, MessageRole,
};
use engram_core::store::{ApiKey, ContextSession, Store, UiSession};
use time::{Duration, OffsetDateTime};

use crate::harness::{memory, message, new_row, now, tenant, user};

/// The jobs of an append are written with its messages or not at all: a crash between the
/// two can never leave messages that no job will embed.
pub async fn append_with_its_jobs(s: Arc<dyn Store>) {
    let t = tenant("t");
    let (u, u2) = (user("u"), user("u2"));
    let c = ConversationId::parse("conv-jobs").unwrap();
    let job = Job::embed_messages(&t, &u, &c);
    let first = vec![message(&t, &u, "conv-jobs", MessageRole::User, "I moved to Lyon")];
    s.append_messages_with_jobs(&t, first, std::slice::from_ref(&job)).await.unwrap();
    let pending = |s: Arc<dyn Store>| async move {
        let jobs = s.list_jobs(Some(&tenant("t")), Some(JobStatus::Pending), 10).await.unwrap();
        jobs.into_iter().map(|j| j.id).collect::<Vec<_>>()
    };
    assert_eq!(pending(s.clone()).await, vec![job.id.clone()]);
    // A second append while that job is pending: deduplicated as enqueue_job does.
    let again = Job::embed_messages(&t, &u, &c);
    let more = vec![message(&t, &u, "conv-jobs", MessageRole::User, "and I work in Paris")];
    s.append_messages_with_jobs(&t, more, &[again]).await.unwrap();
    assert_eq!(pending(s.clone()).await, vec![job.id.clone()]);
    // An append that is refused (another user's conversation) adds no job.
    s.complete_job(&job.id).await.unwrap();
    let stolen = vec![message(&t, &u2, "conv-jobs", MessageRole::User, "hi")];
    let r = s.append_messages_with_jobs(&t, stolen, &[Job::embed_messages(&t, &u2, &c)]).await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    assert!(pending(s.clone()).await.is_empty());
}

pub async fn append_seq_ownership(s: Arc<dyn Store>) {
    let t = tenant("t");
    let (u, u2) = (user("u"), user("u2"));
    let c = ConversationId::parse("conv-1").unwrap();
    let mut tool = message(&t, &u, "conv-1", MessageRole::Tool, "");
    tool.tool_name = Some("get_weather".into());
    tool.tool_args = Some(serde_json::json!({"city": "Paris", "days": 3, "units": ["C"]}));
    tool.tool_result = Some("{\"temp\": 21}".into());
    tool.turn_id = Some("turn-1".into());
    tool.metadata = serde_json::json!({"latency_ms": 12.5});
    let mut first = message(&t, &u, "conv-1", MessageRole::User, "What's the weather in Paris?");
    first.agent_id = Some(AgentId::parse("helper").unwrap());
    let batch =
        vec![first, message(&t, &u, "conv-1", MessageRole::Assistant, "Let me check."), tool];
    let out = s.append_messages(&t, batch.clone()).await.unwrap();
    assert_eq!(out.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2, 3]);
    for (o, b) in out.iter().zip(&batch) {
        assert_eq!(o.id, b.id);
        assert_eq!(s.get_message(&t, o.id).await.unwrap().as_ref(), Some(o), "round trip");
    }
    assert_eq!(
        s.conversation_owner(&t, &c).await.unwrap(),
        Some((u.clone(), Some(AgentId::parse("helper").unwrap())))
    );
    let more = vec![
        message(&t, &u, "conv-1", MessageRole::User, "Thanks"),
        message(&t, &u, "conv-1", MessageRole::Assistant, "You're welcome"),
    ];
    let out2 = s.append_messages(&t, more).await.unwrap();
    assert_eq!(out2.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![4, 5]);
    assert!(s.append_messages(&t, vec![]).await.unwrap().is_empty());

    // Another user may not write into it; nothing of the batch is stored.
    let intruder = message(&t, &u2, "conv-1", MessageRole::User, "hijack");
    let r = s.append_messages(&t, vec![intruder.clone()]).await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    assert!(s.get_message(&t, intruder.id).await.unwrap().is_none());
    assert_eq!(s.conversation_messages(&t, &c).await.unwrap().len(), 5);
    // Nor another agent (issue 10): the conversation was started by `helper`.
    let mut other_agent = message(&t, &u, "conv-1", MessageRole::User, "INJECTED by a2");
    other_agent.agent_id = Some(AgentId::parse("a2").unwrap());
    let r = s.append_messages(&t, vec![other_agent.clone()]).await;
    assert!(matches!(&r, Err(Error::Conflict(m)) if m.contains("another agent")), "{r:?}");
    assert!(s.get_message(&t, other_agent.id).await.unwrap().is_none());
    assert_eq!(s.conversation_messages(&t, &c).await.unwrap().len(), 5);

    // Browsing.
    let page = s.list_messages(&t, &c, 2, 2).await.unwrap();
    assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![3, 4]);
    assert!(s.list_messages(&t, &c, 5, 10).await.unwrap().is_empty());
    let all = s.conversation_messages(&t, &c).await.unwrap();
    assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    assert_eq!(all[2], out[2]);

    // Ratings.
    assert_eq!(s.rate_message(&t, out[1].id, 1).await.unwrap(), 1);
    assert_eq!(s.rate_message(&t, out[1].id, -1).await.unwrap(), 0);
    assert_eq!(s.rate_message(&t, out[1].id, -1).await.unwrap(), -1);
    let r = s.rate_message(&t, MessageId::new(), 1).await;
    assert!(matches!(r, Err(Error::NotFound { .. })), "{r:?}");

    // Tool-call synthesis fills an empty content once.
    assert!(s.set_message_content(&t, out[2].id, "It is 21 °C in Paris.").await.unwrap());
    assert!(!s.set_message_content(&t, out[2].id, "again").await.unwrap());
    assert!(!s.set_message_content(&t, out[0].id, "not empty").await.unwrap());
    assert!(!s.set_message_content(&t, MessageId::new(), "unknown").await.unwrap());
    assert_eq!(
        s.get_message(&t, out[2].id).await.unwrap().unwrap().content,
        "It is 21 °C in Paris."
    );

    // A second conversation of the same user; user_messages orders by conversation, seq.
    s.append_messages(&t, vec![message(&t, &u, "conv-0", MessageRole::User, "earlier")])
        .await
        .unwrap();
    let um = s.user_messages(&t, &u).await.unwrap();
    let order: Vec<(String, i64)> =
        um.iter().map(|m| (m.conversation_id.as_str().to_string(), m.seq)).collect();
    assert_eq!(order[0], ("conv-0".to_string(), 1));
    assert_eq!(order.len(), 6);
    assert!(s.user_messages(&t, &u2).await.unwrap().is_empty());
    assert_eq!(s.list_users(&t).await.unwrap(), vec![u.clone()]);
    let st = s.stats(&t).await.unwrap();
    assert_eq!((st.conversations, st.messages, st.messages_unsummarized), (2, 6, 6));
    // A user with a transcript and no memory is a user, as `list_users` says.
    assert_eq!(st.users, 1);

    // Rolling summary.
    assert_eq!(s.rolling_summary(&t, &c).await.unwrap(), (None, 0));
    s.set_rolling_summary(&t, &c, "The user asked about the weather.", 2).await.unwrap();
    assert_eq!(
        s.rolling_summary(&t, &c).await.unwrap(),
        (Some("The user asked about the weather.".to_string()), 2)
    );
}

pub async fn recalls(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let u = user("u");
    let (m1, m2) = (new_row(memory(&t, &u, "one"), None), new_row(memory(&t, &u, "two"), None));
    let m3 = new_row(memory(&t2, &u, "three"), None);
    s.insert_memories(&t, vec![m1.clone(), m2.clone()]).await.unwrap();
    s.insert_memories(&t2, vec![m3.clone()]).await.unwrap();
    let (a, b, c) = (m1.memory.id, m2.memory.id, m3.memory.id);
    s.record_recall(&t, "turn-1", &[b, a, c, MemoryId::new(), a]).await.unwrap();
    s.record_recall(&t, "turn-1", &[a]).await.unwrap();
    s.record_recall(&t, "turn-1", &[]).await.unwrap();
    let mut got = s.recalled(&t, "turn-1").await.unwrap();
    got.sort();
    let mut want = vec![a, b];
    want.sort();
    assert_eq!(got, want, "own known ids once each");
    assert!(s.recalled(&t, "turn-2").await.unwrap().is_empty());
    assert!(s.recalled(&t2, "turn-1").await.unwrap().is_empty());
    s.purge_memory(&t, a).await.unwrap();
    assert_eq!(s.recalled(&t, "turn-1").await.unwrap(), vec![b]);
}

pub async fn context_sessions(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let session = |pool: Option<&str>, text: &str| ContextSession {
        session_id: "sess-1".into(),
        user_id: u.clone(),
        pool: pool.map(str::to_string),
        text: text.into(),
        memory_ids: vec![MemoryId::new(), MemoryId::new()],
        created_at: now(),
        params: None,
    };
    let s1 = session(None, "Known facts about the user:\n- A");
    s.put_context_session(&t, &s1).await.unwrap();
    assert_eq!(s.get_context_session(&t, "sess-1", &u, None).await.unwrap(), Some(s1.clone()));
    assert!(s.get_context_session(&t, "sess-1", &u, Some("agent:a")).await.unwrap().is_none());
    assert!(s.get_context_session(&t, "sess-1", &user("v"), None).await.unwrap().is_none());
    assert!(s.get_context_session(&t, "sess-2", &u, None).await.unwrap().is_none());
    let s2 = session(Some("agent:a"), "pool a");
    s.put_context_session(&t, &s2).await.unwrap();
    let mut s1b = session(None, "refreshed");
    s1b.memory_ids = vec![];
    // The terms a block was chosen with are kept with it.
    s1b.params = Some(serde_json::json!({ "token_budget": 120, "min_score": 0.05 }));
    s.put_context_session(&t, &s1b).await.unwrap();
    assert_eq!(s.get_context_session(&t, "sess-1", &u, None).await.unwrap(), Some(s1b));
    assert_eq!(s.get_context_session(&t, "sess-1", &u, Some("agent:a")).await.unwrap(), Some(s2));
    // A purge of one of the user's facts drops the user's cached blocks (they may quote it),
    // not another user's.
    let fact = new_row(memory(&t, &u, "The user's PIN is 4921"), None);
    let other = ContextSession { user_id: user("v"), ..session(None, "v's block") };
    s.insert_memories(&t, vec![fact.clone()]).await.unwrap();
    s.put_context_session(&t, &other).await.unwrap();
    s.put_context_session(&t, &session(None, "- The user's PIN is 4921")).await.unwrap();
    s.purge_memory(&t, fact.memory.id).await.unwrap();
    assert!(s.get_context_session(&t, "sess-1", &u, None).await.unwrap().is_none());
    assert!(s.get_context_session(&t, "sess-1", &u, Some("agent:a")).await.unwrap().is_none());
    assert_eq!(s.get_context_session(&t, "sess-1", &user("v"), None).await.unwrap(), Some(other));
}

pub async fn agents(s: Arc<dyn Store>) {
    let t = tenant("t");
    let id = AgentId::parse("support-bot").unwrap();
    let created = now() - Duration::days(1);
    let mut a = Agent {
        tenant_id: t.clone(),
        id: id.clone(),
        memory_enabled: true,
        cluster_id: None,
        dedup_threshold: 0.9,
        settings: serde_json::json!({"extraction": {"policy": "batched", "min_turns": 3}, "pii": "redact"}),
        created_at: created,
        updated_at: created,
    };
    assert!(s.get_agent(&t, &id).await.unwrap().is_none());
    s.put_agent(&a).await.unwrap();
    assert_eq!(s.get_agent(&t, &id).await.unwrap(), Some(a.clone()));
    let mut b = a.clone();
    b.memory_enabled = false;
    b.cluster_id = Some("sales".into());
    b.dedup_threshold = 0.85;
    b.settings = serde_json::json!({});
    b.created_at = now();
    b.updated_at = now();
    s.put_agent(&b).await.unwrap();
    a.memory_enabled = false;
    a.cluster_id = Some("sales".into());
    a.dedup_threshold = 0.85;
    a.settings = serde_json::json!({});
    a.updated_at = b.updated_at;
    assert_eq!(s.get_agent(&t, &id).await.unwrap(), Some(a), "updated; created_at kept");
    assert!(s.get_agent(&tenant("t2"), &id).await.unwrap().is_none());
}

pub async fn api_keys(s: Arc<dyn Store>) {
    let (t1, t2) = (tenant("t1"), tenant("t2"));
    let base = now() - Duration::hours(1);
    let key = |id: &str, t: &engram_core::model::TenantId, role: KeyRole, minute: i64| ApiKey {
        id: id.into(),
        tenant: t.clone(),
        role,
        prefix: format!("egm_{id}"),
        created_at: base + Duration::minutes(minute),
        revoked_at: None,
    };
    let k1 = key("k1", &t1, KeyRole::Admin, 0);
    let k2 = key("k2", &t1, KeyRole::Agent(AgentId::parse("bot").unwrap()), 1);
    let k3 = key("k3", &t2, KeyRole::User(user("alice")), 2);
    assert_eq!(s.count_active_api_keys().await.unwrap(), 0);
    for (k, h) in [(&k1, "h1"), (&k2, "h2"), (&k3, "h3")] {
        s.create_api_key(k, h).await.unwrap();
    }
    assert!(
        s.create_api_key(&key("k4", &t1, KeyRole::Admin, 3), "h1").await.is_err(),
        "hash unique"
    );
    assert_eq!(s.find_api_key("h2").await.unwrap(), Some(k2.clone()));
    assert_eq!(s.find_api_key("h3").await.unwrap(), Some(k3.clone()));
    assert!(s.find_api_key("nope").await.unwrap().is_none());
    assert_eq!(s.list_api_keys(Some(&t1)).await.unwrap(), vec![k1.clone(), k2.clone()]);
    assert_eq!(s.list_api_keys(None).await.unwrap().len(), 3);
    assert_eq!(s.count_active_api_keys().await.unwrap(), 3);
    s.revoke_api_key("k1").await.unwrap();
    assert!(matches!(s.revoke_api_key("k1").await, Err(Error::NotFound { .. })));
    assert!(matches!(s.revoke_api_key("unknown").await, Err(Error::NotFound { .. })));
    assert!(s.find_api_key("h1").await.unwrap().is_none());
    assert_eq!(s.count_active_api_keys().await.unwrap(), 2);
    let listed = s.list_api_keys(Some(&t1)).await.unwrap();
    assert!(listed[0].revoked_at.is_some() && listed[1].revoked_at.is_none());
}

/// Web-UI sign-ins: found by their token's hash while unexpired and while their key is
/// active, ended by deletion, swept when a later sign-in is made; a key id of one tenant
/// never stands for another tenant's key of the same id.
pub async fn ui_sessions(s: Arc<dyn Store>) {
    let t = tenant("t1");
    let at =
        |secs: i64| OffsetDateTime::from_unix_timestamp(now().unix_timestamp() + secs).unwrap();
    let key = |id: &str, role: KeyRole| ApiKey {
        id: id.into(),
        tenant: t.clone(),
        role,
        prefix: format!("egm_{id}"),
        created_at: at(-60),
        revoked_at: None,
    };
    let (admin, alice) = (key("ka", KeyRole::Admin), key("ku", KeyRole::User(user("alice"))));
    s.create_api_key(&admin, "ha").await.unwrap();
    s.create_api_key(&alice, "hu").await.unwrap();
    let session = |token: &str, key: &ApiKey, from: i64, to: i64| UiSession {
        token_hash: token.into(),
        tenant: key.tenant.clone(),
        key_id: key.id.clone(),
        csrf: format!("csrf-{token}"),
        created_at: at(from),
        expires_at: at(to),
    };
    let (a, u) = (session("sa", &admin, 0, 3600), session("su", &alice, 0, 3600));
    s.create_ui_session(&a).await.unwrap();
    s.create_ui_session(&u).await.unwrap();
    assert_eq!(s.find_ui_session("sa", at(1)).await.unwrap(), Some((a.clone(), admin.clone())));
    assert_eq!(s.find_ui_session("su", at(1)).await.unwrap(), Some((u.clone(), alice.clone())));
    assert_eq!(s.find_ui_session("ha", at(1)).await.unwrap(), None, "a key hash is no token");
    assert_eq!(s.find_ui_session("sa", at(3600)).await.unwrap(), None, "expired");
    // Another tenant's sign-in naming the same key id does not stand for this tenant's key.
    let mut foreign = session("sf", &admin, 0, 3600);
    foreign.tenant = tenant("t2");
    s.create_ui_session(&foreign).await.unwrap();
    assert_eq!(s.find_ui_session("sf", at(1)).await.unwrap(), None);
    // Signing out ends one sign-in; revoking a key ends its sign-ins.
    s.delete_ui_session("sa").await.unwrap();
    s.delete_ui_session("sa").await.unwrap();
    assert_eq!(s.find_ui_session("sa", at(1)).await.unwrap(), None);
    s.revoke_api_key("ku").await.unwrap();
    assert_eq!(s.find_ui_session("su", at(1)).await.unwrap(), None, "revoked key");
    // A new sign-in sweeps the expired ones: made two hours later, "sb" of an hour ago is gone
    // even once the clock is read as before.
    let b = session("sb", &admin, 0, 3600);
    s.create_ui_session(&b).await.unwrap();
    s.create_ui_session(&session("sc", &admin, 7200, 10800)).await.unwrap();
    assert_eq!(s.find_ui_session("sb", at(1)).await.unwrap(), None, "swept");
    assert!(s.find_ui_session("sc", at(7201)).await.unwrap().is_some());
}

/// `get_messages` and `get_agents`: several rows in one call, unknown ids and other tenants'
/// rows left out (issue 11: a message search loads its candidates at once).
pub async fn batched_reads(s: Arc<dyn Store>) {
    let (t, other) = (tenant("t"), tenant("other"));
    let u = user("u");
    let msgs = vec![
        message(&t, &u, "c1", MessageRole::User, "first"),
        message(&t, &u, "c1", MessageRole::Assistant, "second"),
        message(&t, &u, "c1", MessageRole::User, "third"),
    ];
    let stored = s.append_messages(&t, msgs).await.unwrap();
    let foreign = s
        .append_messages(&other, vec![message(&other, &u, "c1", MessageRole::User, "x")])
        .await
        .unwrap();
    let mut ids: Vec<MessageId> = stored.iter().map(|m| m.id).collect();
    ids.push(MessageId::new());
    ids.push(foreign[0].id);
    let mut got = s.get_messages(&t, &ids).await.unwrap();
    got.sort_by_key(|m| m.seq);
    assert_eq!(got, stored);
    assert!(s.get_messages(&t, &[]).await.unwrap().is_empty());

    let agent = |tn: &engram_core::model::TenantId, id: &str| Agent {
        tenant_id: tn.clone(),
        id: AgentId::parse(id).unwrap(),
        memory_enabled: true,
        cluster_id: Some("desk".into()),
        dedup_threshold: 0.9,
        settings: serde_json::json!({}),
        created_at: now(),
        updated_at: now(),
    };
    for a in [agent(&t, "a1"), agent(&t, "a2"), agent(&other, "a3")] {
        s.put_agent(&a).await.unwrap();
    }
    let ids: Vec<AgentId> =
        ["a1", "a2", "a3", "nobody"].iter().map(|a| AgentId::parse(*a).unwrap()).collect();
    let mut got: Vec<String> =
        s.get_agents(&t, &ids).await.unwrap().into_iter().map(|a| a.id.to_string()).collect();
    got.sort();
    assert_eq!(got, ["a1", "a2"]);
    assert!(s.get_agents(&t, &[]).await.unwrap().is_empty());
}

/// The UI's lists: agents by id, conversations newest first with their owner and size, a
/// page at a time, per user, never another tenant's.
pub async fn listing_agents_and_conversations(s: Arc<dyn Store>) {
    let (t, other) = (tenant("t"), tenant("other"));
    let (u, u2) = (user("u"), user("u2"));
    for (tenant, id) in [(&t, "zeta"), (&t, "alpha"), (&other, "beta")] {
        let at = now();
        let a = Agent {
            tenant_id: tenant.clone(),
            id: AgentId::parse(id).unwrap(),
            memory_enabled: true,
            cluster_id: None,
            dedup_threshold: 0.9,
            settings: serde_json::json!({}),
            created_at: at,
            updated_at: at,
        };
        s.put_agent(&a).await.unwrap();
    }
    let ids: Vec<String> =
        s.list_agents(&t).await.unwrap().into_iter().map(|a| a.id.to_string()).collect();
    assert_eq!(ids, ["alpha", "zeta"]);

    for (who, conv, n) in [(&u, "c1", 1), (&u2, "c2", 2), (&u, "c3", 3)] {
        let msgs = (0..n).map(|i| message(&t, who, conv, MessageRole::User, &format!("m{i}")));
        s.append_messages(&t, msgs.collect()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    s.append_messages(&other, vec![message(&other, &u, "c9", MessageRole::User, "hi")])
        .await
        .unwrap();
    let all = s.list_conversations(&t, None, None, 10).await.unwrap();
    let listed: Vec<(&str, &str, i64)> =
        all.iter().map(|c| (c.id.as_str(), c.user_id.as_str(), c.messages)).collect();
    assert_eq!(listed, [("c3", "u", 3), ("c2", "u2", 2), ("c1", "u", 1)]);
    let first = s.list_conversations(&t, None, None, 2).await.unwrap();
    let last = first.last().unwrap();
    let rest = s.list_conversations(&t, None, Some((last.updated_at, &last.id)), 2).await.unwrap();
    assert_eq!(rest.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c1"]);
    let mine = s.list_conversations(&t, Some(&u), None, 10).await.unwrap();
    assert_eq!(mine.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c3", "c1"]);
}

/// The conversations a lowered compaction threshold applies to: the agent's, in the tenant,
/// with more messages than the threshold that no summary covers.
pub async fn conversations_to_compact_are_the_agents_over_its_threshold(s: Arc<dyn Store>) {
    let (t, other) = (tenant("t"), tenant("other"));
    let (u, a, b) = (user("u"), AgentId::parse("a").unwrap(), AgentId::parse("b").unwrap());
    for (tenant, agent, conv, n) in
        [(&t, &a, "big", 30), (&t, &a, "small", 5), (&t, &b, "theirs", 30), (&other, &a, "far", 30)]
    {
        let msgs = (0..n).map(|i| {
            let mut m = message(tenant, &u, conv, MessageRole::User, &format!("m{i}"));
            m.agent_id = Some(agent.clone());
            m
        });
        s.append_messages(tenant, msgs.collect()).await.unwrap();
    }
    let over = |n: i64| {
        let s = s.clone();
        let (t, a) = (t.clone(), a.clone());
        async move {
            let found = s.conversations_to_compact(&t, &a, n, 10).await.unwrap();
            found.into_iter().map(|c| c.id.to_string()).collect::<Vec<_>>()
        }
    };
    assert_eq!(over(20).await, ["big"]);
    assert_eq!(over(4).await.len(), 2);
    assert!(over(30).await.is_empty(), "30 messages are not more than 30");
}

/// The speakers of a user's transcripts: recorded as labelled messages are appended, once
/// each, per tenant and user; a refused append records nothing; erased with the user.
pub async fn speakers_are_recorded_per_user(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let (u, u2) = (user("u"), user("u2"));
    let say = |t: &engram_core::model::TenantId,
               u: &engram_core::model::UserId,
               c: &str,
               text: &str| { message(t, u, c, MessageRole::User, text) };
    s.append_messages(
        &t,
        vec![
            say(&t, &u, "group", "Maria: I got a puppy!"),
            say(&t, &u, "group", "John: What's her name?"),
            say(&t, &u, "group", "Maria: Coco."),
            say(&t, &u, "group", "no label here: just text"),
            say(&t, &u, "group", "Note the time 10:30"),
        ],
    )
    .await
    .unwrap();
    s.append_messages(&t, vec![say(&t, &u, "other", "Dr. Ana Ruiz: two a day")]).await.unwrap();
    s.append_messages(&t, vec![say(&t, &u2, "theirs", "Zoë: ciao")]).await.unwrap();
    s.append_messages(&t2, vec![say(&t2, &u, "group", "Pierre: salut")]).await.unwrap();
    assert_eq!(s.speakers(&t, &u).await.unwrap(), ["Dr. Ana Ruiz", "John", "Maria"]);
    assert_eq!(s.speakers(&t, &u2).await.unwrap(), ["Zoë"]);
    assert_eq!(s.speakers(&t2, &u).await.unwrap(), ["Pierre"]);
    // Appending to another user's conversation is refused, and names no speaker.
    let r = s.append_messages(&t, vec![say(&t, &u2, "group", "Mallory: hi")]).await;
    assert!(matches!(r, Err(Error::Conflict(_))), "{r:?}");
    assert!(!s.speakers(&t, &u2).await.unwrap().contains(&"Mallory".to_string()));
    s.erase_user(&t, &u).await.unwrap();
    assert!(s.speakers(&t, &u).await.unwrap().is_empty());
    assert_eq!(s.speakers(&t, &u2).await.unwrap(), ["Zoë"]);
    assert_eq!(s.speakers(&t2, &u).await.unwrap(), ["Pierre"]);
}

/// The days a message's relative dates point to are recorded when it is appended, per
/// tenant and user: a message that spoke of a time years later is found by that time,
/// within the filter's window, and erased with its user.
pub async fn message_dates_are_recorded_per_user(s: Arc<dyn Store>) {
    use engram_core::store::TranscriptFilter;
    use time::macros::datetime;
    let (t, t2) = (tenant("t"), tenant("t2"));
    let (u, u2) = (user("u"), user("u2"));
    let said = |t: &engram_core::model::TenantId, u: &engram_core::model::UserId, text: &str| {
        let mut m = message(t, u, "c", MessageRole::User, text);
        m.created_at = datetime!(2023-10-02 19:00 UTC);
        m
    };
    let mine = s
        .append_messages(
            &t,
            vec![
                said(&t, &u, "Three years ago I moved to Lisbon."),
                said(&t, &u, "Last summer we sailed around Crete."),
                said(&t, &u, "No date in this one."),
            ],
        )
        .await
        .unwrap();
    let mut theirs = said(&t, &u2, "Three years ago I moved to Oslo.");
    theirs.conversation_id = ConversationId::parse("c2").unwrap();
    s.append_messages(&t, vec![theirs]).await.unwrap();
    s.append_messages(&t2, vec![said(&t2, &u, "Three years ago I moved to Rome.")]).await.unwrap();

    let about = async |t: &engram_core::model::TenantId, f: &TranscriptFilter, day| {
        let day: time::OffsetDateTime = day;
        let rows = s.messages_said_about(t, f, day, day, 10).await.unwrap();
        rows.into_iter().map(|m| m.content).collect::<Vec<_>>()
    };
    let all = TranscriptFilter::user(u.clone());
    let in_2020 = datetime!(2020-03-01 0:00 UTC);
    assert_eq!(about(&t, &all, in_2020).await, ["Three years ago I moved to Lisbon."]);
    assert_eq!(
        about(&t, &all, datetime!(2023-07-04 0:00 UTC)).await,
        ["Last summer we sailed around Crete."]
    );
    assert!(about(&t, &all, datetime!(2021-03-01 0:00 UTC)).await.is_empty());
    // The window bounds when the message was sent, not the days it names.
    let before = TranscriptFilter { until: Some(datetime!(2023-01-01 0:00 UTC)), ..all.clone() };
    assert!(about(&t, &before, in_2020).await.is_empty());
    // Another user's and another tenant's are their own.
    let theirs_f = TranscriptFilter::user(u2.clone());
    assert_eq!(about(&t, &theirs_f, in_2020).await, ["Three years ago I moved to Oslo."]);
    assert_eq!(about(&t2, &all, in_2020).await, ["Three years ago I moved to Rome."]);
    // Recording them again changes nothing.
    assert_eq!(s.index_message_dates(&t, &mine).await.unwrap(), 0);
    assert_eq!(about(&t, &all, in_2020).await.len(), 1);
    s.erase_user(&t, &u).await.unwrap();
    assert!(about(&t, &all, in_2020).await.is_empty());
    assert_eq!(about(&t, &theirs_f, in_2020).await.len(), 1);
    assert_eq!(about(&t2, &all, in_2020).await.len(), 1);
}
