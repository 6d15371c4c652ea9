//! Two stores on one database (two processes) and many tasks at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{ConversationId, EventKind, MessageRole};
use engram_core::store::{MemoryFilter, Store};
use time::Duration;

use crate::harness::{MODEL, event, memory, message, new_row, now, tenant, unit, user};
use crate::jobs::job;

pub async fn concurrent_claims_never_hand_out_a_job_twice(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let t = tenant("t");
    let base = now();
    let mut all = BTreeSet::new();
    let mut locked: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..120 {
        let j = job(&t, None, None, base - Duration::milliseconds(i % 7));
        all.insert(j.id.clone());
        a.enqueue_job(&j).await.unwrap();
    }
    for i in 0..24 {
        let key = format!("conv:{}", i % 3);
        let j = job(&t, None, Some(&key), base - Duration::milliseconds(i % 5));
        locked.insert(j.id.clone(), key);
        b.enqueue_job(&j).await.unwrap();
    }
    let lease = base + Duration::hours(1);
    let mut tasks = Vec::new();
    for w in 0..12 {
        let s = if w % 2 == 0 { a.clone() } else { b.clone() };
        // A third of the workers claim in groups (the embedding lane's `claim_jobs`).
        let grouped = w % 3 == 0;
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let kinds = engram_core::model::JobKind::ALL;
                let batch = if grouped {
                    s.claim_jobs(base, lease, kinds, 4).await.unwrap()
                } else {
                    s.claim_job(base, lease, kinds).await.unwrap().into_iter().collect()
                };
                if batch.is_empty() {
                    break;
                }
                got.extend(batch);
            }
            got
        }));
    }
    let mut claimed = Vec::new();
    for t in tasks {
        claimed.extend(t.await.unwrap());
    }
    // Whatever a racing claim left behind is still claimable afterwards.
    while let Some(j) = a.claim_job(base, lease, engram_core::model::JobKind::ALL).await.unwrap() {
        claimed.push(j);
    }
    let ids: Vec<&String> = claimed.iter().map(|j| &j.id).collect();
    let unique: BTreeSet<&String> = ids.iter().copied().collect();
    assert_eq!(ids.len(), unique.len(), "a job was handed out twice");
    assert!(claimed.iter().all(|j| j.attempts == 1));
    let plain: BTreeSet<String> =
        claimed.iter().filter(|j| j.lock_key.is_none()).map(|j| j.id.clone()).collect();
    assert_eq!(plain, all, "every job without a lock key was claimed");
    let keys: Vec<&String> = claimed.iter().filter_map(|j| j.lock_key.as_ref()).collect();
    let distinct: BTreeSet<&String> = keys.iter().copied().collect();
    assert_eq!(
        (keys.len(), distinct.len()),
        (3, 3),
        "exactly one running job per lock key: {keys:?}"
    );
    assert!(claimed.iter().filter(|j| j.lock_key.is_some()).all(|j| locked.contains_key(&j.id)));
}

pub async fn concurrent_appends_get_consecutive_seqs(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let mut tasks = Vec::new();
    for w in 0..8 {
        let s = if w % 2 == 0 { a.clone() } else { b.clone() };
        let (t, u) = (t.clone(), u.clone());
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..5 {
                let batch = (0..3)
                    .map(|k| {
                        message(&t, &u, "shared", MessageRole::User, &format!("w{w} i{i} k{k}"))
                    })
                    .collect();
                let out = s.append_messages(&t, batch).await.unwrap();
                let got: Vec<i64> = out.iter().map(|m| m.seq).collect();
                assert_eq!(got[1] - got[0], 1, "a batch is contiguous");
                assert_eq!(got[2] - got[1], 1, "a batch is contiguous");
                seqs.extend(got);
            }
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.extend(task.await.unwrap());
    }
    seqs.sort();
    assert_eq!(seqs, (1..=120).collect::<Vec<i64>>());
    let c = ConversationId::parse("shared").unwrap();
    let stored = b.conversation_messages(&t, &c).await.unwrap();
    assert_eq!(stored.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=120).collect::<Vec<i64>>());
}

/// Racing inserts from two processes: of eight profile facts under one key one is stored
/// (the others `Conflict`, so the engine reads again and supersedes), and of eight identical
/// facts marked unique one is stored; unmarked identical facts are all stored (an import
/// keeps what it is given), and an expired fact does not block a unique one.
pub async fn racing_inserts_keep_one_profile_value_and_one_unique_fact(
    a: Arc<dyn Store>,
    b: Arc<dyn Store>,
) {
    use engram_core::model::Kind;
    let t = tenant("t");
    let u = user("u");
    a.ensure_embedding_space(MODEL, 4).await.unwrap();
    let race = |rows: Vec<engram_core::store::NewMemory>| {
        let (a, b, t) = (a.clone(), b.clone(), t.clone());
        async move {
            let mut tasks = Vec::new();
            for (w, row) in rows.into_iter().enumerate() {
                let s = if w % 2 == 0 { a.clone() } else { b.clone() };
                let t = t.clone();
                tasks.push(tokio::spawn(async move { s.insert_memories(&t, vec![row]).await }));
            }
            let mut stored = 0;
            for task in tasks {
                match task.await.unwrap() {
                    Ok(()) => stored += 1,
                    Err(Error::Conflict(_)) => {}
                    Err(e) => panic!("unexpected error: {e:?}"),
                }
            }
            stored
        }
    };
    let profile = |w: usize| {
        let mut m = memory(&t, &u, &format!("UTC+{w}"));
        (m.kind, m.key) = (Kind::Profile, Some("tz".into()));
        new_row(m, None)
    };
    assert_eq!(race((0..8).map(profile).collect()).await, 1, "one value per key");
    let same = |unique: bool, text: &str| {
        let mut row = new_row(memory(&t, &u, text), Some(unit(4, 3)));
        row.unique = unique;
        row
    };
    assert_eq!(race((0..8).map(|_| same(true, "The user keeps bees")).collect()).await, 1);
    assert_eq!(race((0..3).map(|_| same(false, "The user rows")).collect()).await, 3);
    let mut gone = same(false, "The user is in Oslo");
    gone.memory.expires_at = Some(now() - Duration::seconds(1));
    a.insert_memories(&t, vec![gone]).await.unwrap();
    b.insert_memories(&t, vec![same(true, "The user is in Oslo")]).await.unwrap();
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    assert_eq!(b.list_memories(&t, &f, None, 20).await.unwrap().memories.len(), 1 + 1 + 3 + 1);
}

pub async fn concurrent_supersedes_have_one_winner(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    a.ensure_embedding_space(MODEL, 4).await.unwrap();
    let original = new_row(memory(&t, &u, "The user lives in Paris"), Some(unit(4, 1)));
    a.insert_memories(&t, vec![original.clone()]).await.unwrap();
    let id = original.memory.id;
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let s = if w % 2 == 0 { a.clone() } else { b.clone() };
        let (t, u) = (t.clone(), u.clone());
        tasks.push(tokio::spawn(async move {
            let succ = new_row(
                memory(&t, &u, &format!("The user lives in city {w}")),
                Some(unit(4, 10 + w)),
            );
            let sid = succ.memory.id;
            let r =
                s.supersede(&t, id, Some(succ), event(id, EventKind::Superseded, Some(sid))).await;
            (sid, r)
        }));
    }
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        let (sid, r) = task.await.unwrap();
        match r {
            Ok(()) => winners.push(sid),
            Err(Error::Conflict(_)) => losers.push(sid),
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one edit wins");
    let (chain, _) = b.history(&t, id).await.unwrap();
    assert_eq!(chain.iter().map(|m| m.id).collect::<Vec<_>>(), vec![id, winners[0]]);
    for l in losers {
        assert!(a.get_memory(&t, l).await.unwrap().is_none(), "a losing successor was stored");
    }
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    assert_eq!(a.list_memories(&t, &f, None, 10).await.unwrap().memories.len(), 1);
}

pub async fn writes_of_one_process_are_seen_by_the_other(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    a.ensure_embedding_space(MODEL, 4).await.unwrap();
    let f = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let q = unit(4, 1);
    // b searches first, so that any cache it keeps has to catch up later.
    assert!(b.vector_search(&t, &f, &q, 10).await.unwrap().is_empty());
    let m1 = new_row(memory(&t, &u, "first"), Some(unit(4, 1)));
    a.insert_memories(&t, vec![m1.clone()]).await.unwrap();
    let ids = |v: Vec<(engram_core::model::MemoryId, f32)>| {
        v.into_iter().map(|h| h.0).collect::<Vec<_>>()
    };
    assert_eq!(ids(b.vector_search(&t, &f, &q, 10).await.unwrap()), vec![m1.memory.id]);
    let m2 = new_row(memory(&t, &u, "second"), Some(unit(4, 2)));
    a.supersede(
        &t,
        m1.memory.id,
        Some(m2.clone()),
        event(m1.memory.id, EventKind::Superseded, Some(m2.memory.id)),
    )
    .await
    .unwrap();
    assert_eq!(ids(b.vector_search(&t, &f, &q, 10).await.unwrap()), vec![m2.memory.id]);
    a.set_vectors(&t, MODEL, vec![(m2.memory.id, unit(4, 1))]).await.unwrap();
    let hits = b.vector_search(&t, &f, &q, 10).await.unwrap();
    assert!((hits[0].1 - 1.0).abs() < 1e-5, "b sees the new vector: {hits:?}");
    a.purge_memory(&t, m2.memory.id).await.unwrap();
    assert!(b.vector_search(&t, &f, &q, 10).await.unwrap().is_empty());
    let m3 = new_row(memory(&t, &u, "third"), Some(unit(4, 3)));
    a.insert_memories(&t, vec![m3.clone()]).await.unwrap();
    assert_eq!(ids(b.vector_search(&t, &f, &q, 10).await.unwrap()), vec![m3.memory.id]);
    a.erase_user(&t, &u).await.unwrap();
    assert!(b.vector_search(&t, &f, &q, 10).await.unwrap().is_empty());
    let m4 = new_row(memory(&t, &u, "fourth"), Some(unit(4, 4)));
    a.insert_memories(&t, vec![m4.clone()]).await.unwrap();
    assert_eq!(ids(b.vector_search(&t, &f, &q, 10).await.unwrap()), vec![m4.memory.id]);
    assert_eq!(b.get_memory(&t, m4.memory.id).await.unwrap(), Some(m4.memory));
}

/// Purge on both backends (issue 11 made the order the same): the row, its events and
/// recalls go and links to it are cleared, in one transaction, and the other process's
/// search drops it at once; a purge of an unknown id, or of another tenant's, is NotFound
/// and changes nothing either process can see.
pub async fn purge_is_one_step_for_every_process(a: Arc<dyn Store>, b: Arc<dyn Store>) {
    let (t, other) = (tenant("t"), tenant("other"));
    let u = user("u");
    a.ensure_embedding_space(MODEL, 4).await.unwrap();
    let f =
        MemoryFilter { user_id: Some(u.clone()), include_superseded: true, ..Default::default() };
    let q = unit(4, 1);
    let old = new_row(memory(&t, &u, "old"), Some(unit(4, 1)));
    let mid = new_row(memory(&t, &u, "mid"), Some(unit(4, 1)));
    let foreign = new_row(memory(&other, &u, "foreign"), Some(unit(4, 1)));
    a.insert_memories(&t, vec![old.clone()]).await.unwrap();
    a.insert_memories(&other, vec![foreign.clone()]).await.unwrap();
    a.supersede(
        &t,
        old.memory.id,
        Some(mid.clone()),
        event(old.memory.id, EventKind::Superseded, Some(mid.memory.id)),
    )
    .await
    .unwrap();
    a.record_recall(&t, "turn-1", &[mid.memory.id]).await.unwrap();
    // b has both rows in view before the purges.
    assert_eq!(b.vector_search(&t, &f, &q, 10).await.unwrap().len(), 1, "active only");
    let before = b.user_memories(&t, &u).await.unwrap();
    for (tenant, id) in [(&t, engram_core::model::MemoryId::new()), (&t, foreign.memory.id)] {
        let e = a.purge_memory(tenant, id).await.unwrap_err();
        assert_eq!(e.code(), engram_core::ErrorCode::NotFound, "{e:?}");
    }
    assert_eq!(b.user_memories(&t, &u).await.unwrap(), before, "a failed purge changed rows");
    assert!(b.get_memory(&other, foreign.memory.id).await.unwrap().is_some());

    a.purge_memory(&t, mid.memory.id).await.unwrap();
    assert!(b.vector_search(&t, &f, &q, 10).await.unwrap().is_empty(), "b still finds it");
    assert!(b.get_memory(&t, mid.memory.id).await.unwrap().is_none());
    let (rows, events) = b.user_memories(&t, &u).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].superseded_by, None, "the link to the purged row is cleared");
    assert!(events.iter().all(|e| e.memory_id != mid.memory.id), "its events are gone");
    assert!(b.recalled(&t, "turn-1").await.unwrap().is_empty(), "its recall is gone");
}
