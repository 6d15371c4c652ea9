//! Working memory: put (create, replace, restart after expiry), get, delete and list by
//! `(tenant, user, agent, session, key)`, expiry at read time, the sweep, and erasure.

use std::sync::Arc;

use engram_core::model::{AgentId, SessionId, SessionState, StateKey, TenantId, UserId};
use engram_core::store::StateScope;
use engram_core::store::prelude::*;
use serde_json::json;
use time::{Duration, OffsetDateTime};

use crate::harness::{now, tenant, user};

fn scope(u: &UserId, agent: Option<&str>, session: &str) -> StateScope {
    StateScope {
        user: u.clone(),
        agent: agent.map(|a| AgentId::parse(a).unwrap()),
        session: SessionId::parse(session).unwrap(),
    }
}

fn entry(
    t: &TenantId,
    s: &StateScope,
    key: &str,
    value: serde_json::Value,
    at: OffsetDateTime,
    ttl: Duration,
) -> SessionState {
    SessionState {
        tenant_id: t.clone(),
        user_id: s.user.clone(),
        agent_id: s.agent.clone(),
        session_id: s.session.clone(),
        key: StateKey::parse(key).unwrap(),
        value,
        expires_at: at + ttl,
        created_at: at,
        updated_at: at,
    }
}

fn key(k: &str) -> StateKey {
    StateKey::parse(k).unwrap()
}

pub async fn state_is_kept_per_address_and_expires(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let (u, u2) = (user("u"), user("u2"));
    let base = now();
    let hour = Duration::hours(1);
    let here = scope(&u, Some("a1"), "s1");
    let put = entry(&t, &here, "plan", json!({"steps": ["book", "pay"], "at": 1}), base, hour);
    let stored = s.put_state(&put).await.unwrap();
    assert_eq!(stored, put);
    assert_eq!(s.get_state(&t, &here, &key("plan"), base).await.unwrap(), Some(put.clone()));

    // Every other address is another entry: tenant, user, agent (or none), session, key.
    let elsewhere = [
        (t2.clone(), here.clone(), "plan"),
        (t.clone(), scope(&u2, Some("a1"), "s1"), "plan"),
        (t.clone(), scope(&u, Some("a2"), "s1"), "plan"),
        (t.clone(), scope(&u, None, "s1"), "plan"),
        (t.clone(), scope(&u, Some("a1"), "s2"), "plan"),
        (t.clone(), here.clone(), "PLAN"),
    ];
    for (tt, sc, k) in &elsewhere {
        assert_eq!(s.get_state(tt, sc, &key(k), base).await.unwrap(), None, "{tt} {sc:?} {k}");
    }
    let mine = entry(&t, &scope(&u, None, "s1"), "plan", json!("no agent"), base, hour);
    s.put_state(&mine).await.unwrap();
    assert_eq!(s.get_state(&t, &here, &key("plan"), base).await.unwrap(), Some(put.clone()));

    // Replacing keeps the creation time; the value, expiry and update time are the new ones.
    let later = base + Duration::minutes(5);
    let replaced = s
        .put_state(&entry(&t, &here, "plan", json!([1, 2, 3]), later, Duration::minutes(10)))
        .await
        .unwrap();
    assert_eq!(
        (replaced.value.clone(), replaced.created_at, replaced.updated_at, replaced.expires_at),
        (json!([1, 2, 3]), base, later, later + Duration::minutes(10))
    );
    assert_eq!(s.get_state(&t, &here, &key("plan"), later).await.unwrap(), Some(replaced.clone()));

    // Unreadable the instant its TTL ends, before any sweep.
    let end = later + Duration::minutes(10);
    let just_before = end - Duration::microseconds(1);
    assert!(s.get_state(&t, &here, &key("plan"), just_before).await.unwrap().is_some());
    assert_eq!(s.get_state(&t, &here, &key("plan"), end).await.unwrap(), None);
    assert!(s.list_state(&t, &u, Some(&here), end).await.unwrap().is_empty());
    // A put over the expired entry starts a new one.
    let again = end + Duration::seconds(1);
    let fresh = s.put_state(&entry(&t, &here, "plan", json!(true), again, hour)).await.unwrap();
    assert_eq!(fresh.created_at, again);
}

pub async fn state_lists_deletes_and_sweeps(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let base = now();
    let here = scope(&u, None, "run-7");
    for (k, ttl) in [("b", 60), ("a", 60), ("short", 1), ("c", 3600)] {
        let e = entry(&t, &here, k, json!({ "k": k }), base, Duration::seconds(ttl));
        s.put_state(&e).await.unwrap();
    }
    let other = scope(&u, None, "run-8");
    s.put_state(&entry(&t, &other, "a", json!(1), base, Duration::seconds(60))).await.unwrap();

    let listed = s.list_state(&t, &u, Some(&here), base).await.unwrap();
    let keys: Vec<&str> = listed.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c", "short"], "by key, this session only");
    let after = base + Duration::seconds(2);
    let keys: Vec<String> = s
        .list_state(&t, &u, Some(&here), after)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key.to_string())
        .collect();
    assert_eq!(keys, ["a", "b", "c"], "the expired key is not listed");
    let all = s.list_state(&t, &u, None, after).await.unwrap();
    assert_eq!(all.len(), 4, "every session of the user: {all:?}");

    assert!(s.delete_state(&t, &here, &key("a"), after).await.unwrap());
    assert!(!s.delete_state(&t, &here, &key("a"), after).await.unwrap(), "already gone");
    assert!(!s.delete_state(&t, &here, &key("short"), after).await.unwrap(), "expired");
    assert_eq!(
        s.get_state(&t, &other, &key("a"), after).await.unwrap().map(|e| e.value),
        Some(json!(1))
    );

    // The sweep deletes what has expired, in every tenant, and nothing else.
    s.put_state(&entry(&tenant("t2"), &here, "x", json!(0), base, Duration::seconds(1)))
        .await
        .unwrap();
    let swept = s.sweep_state(base + Duration::seconds(90)).await.unwrap();
    assert_eq!(swept, 3, "b and run-8's a (60 s) and t2's x; short was deleted above");
    let left = s.list_state(&t, &u, None, base).await.unwrap();
    assert_eq!(left.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["c"]);
    assert_eq!(s.sweep_state(base + Duration::seconds(90)).await.unwrap(), 0);
}
