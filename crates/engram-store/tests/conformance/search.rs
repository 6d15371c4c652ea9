//! Vector search (exact, equal to brute force under every filter) and keyword search.

use std::collections::BTreeSet;
use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{Category, EventKind, Kind, Memory, MemoryId, MessageRole};
use engram_core::store::{MemoryFilter, Store, TranscriptFilter};
use time::{Duration, OffsetDateTime};

use crate::harness::{
    MODEL, dot, event, memory, message, new_row, normalize, now, tenant, unit, user,
};

/// Rows a vector search may return for `f` (the user's active, unexpired rows with a
/// vector, admitted by the filter), as a brute-force scan sees them.
fn admits(f: &MemoryFilter, m: &Memory, at: OffsetDateTime) -> bool {
    Some(&m.user_id) == f.user_id.as_ref()
        && m.superseded_at.is_none()
        && m.expires_at.is_none_or(|e| e > at)
        && f.pool.as_ref().is_none_or(|p| {
            m.pool.as_deref() == Some(p.as_str()) || m.pool.is_none() || m.kind == Kind::Shared
        })
        && f.kinds.as_ref().is_none_or(|k| k.contains(&m.kind))
        && f.categories.as_ref().is_none_or(|c| c.contains(&m.category))
        && f.since.is_none_or(|s| m.observed_at >= s)
        && f.until.is_none_or(|u| m.observed_at < u)
}

/// `got` equals the brute-force top k: same scores position by position, and the same ids
/// except where two scores tie (within float noise).
fn assert_top_k(
    got: &[(MemoryId, f32)],
    rows: &[(Memory, Vec<f32>)],
    f: &MemoryFilter,
    q: &[f32],
    k: usize,
) {
    let at = OffsetDateTime::now_utc();
    let mut want: Vec<(MemoryId, f32)> =
        rows.iter().filter(|(m, _)| admits(f, m, at)).map(|(m, v)| (m.id, dot(v, q))).collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    want.truncate(k);
    assert_eq!(got.len(), want.len(), "result size for {f:?}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g.1 - w.1).abs() < 1e-4, "score at {i}: got {g:?}, want {w:?} ({f:?})");
        if g.0 != w.0 {
            let tie = want.iter().any(|x| x.0 == g.0 && (x.1 - w.1).abs() < 1e-5);
            assert!(tie, "id at {i}: got {g:?}, want {w:?} ({f:?})");
        }
    }
    assert!(got.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
}

pub async fn vector_search_equals_brute_force(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let (u, u2) = (user("u"), user("u2"));
    let dims = 12;
    s.ensure_embedding_space(MODEL, dims).await.unwrap();
    let base = now() - Duration::days(30);
    let pools = [Some("agent:a"), Some("agent:b"), Some("cluster:c"), None];
    let mut rows: Vec<(Memory, Vec<f32>)> = Vec::new();
    let mut batch = Vec::new();
    for i in 0..240u64 {
        let mut m = memory(&t, &u, &format!("memory {i}"));
        m.pool = pools[(i % 4) as usize].map(str::to_string);
        m.kind = if i % 7 == 0 { Kind::Shared } else { Kind::Knowledge };
        m.category = Category::ALL[(i % 6) as usize];
        m.observed_at = base + Duration::hours(i as i64 * 3);
        if i % 23 == 0 {
            m.expires_at = Some(now() - Duration::minutes(5));
        } else if i % 29 == 0 {
            m.expires_at = Some(now() + Duration::days(1));
        }
        // Some exact duplicates, to exercise ties.
        let v = if i % 40 == 1 { unit(dims, 1) } else { unit(dims, 1000 + i) };
        let row = new_row(m, Some(v.clone()));
        rows.push((row.memory.clone(), v));
        batch.push(row);
    }
    s.insert_memories(&t, batch).await.unwrap();
    // Profile facts (no vector), another user and another tenant with vectors equal to the
    // queries: none of them may ever show up.
    let mut noise = Vec::new();
    for q in 0..5u64 {
        let mut p = memory(&t, &u, "profile");
        p.kind = Kind::Profile;
        p.key = Some(format!("k{q}"));
        noise.push(new_row(p, None));
        noise.push(new_row(memory(&t, &u2, "other user"), Some(unit(dims, q))));
    }
    s.insert_memories(&t, noise).await.unwrap();
    s.insert_memories(&t2, vec![new_row(memory(&t2, &u, "other tenant"), Some(unit(dims, 0)))])
        .await
        .unwrap();
    // Forget a few rows: they leave the index.
    for (m, _) in rows.iter_mut().filter(|(m, _)| m.content.ends_with('5')) {
        s.supersede(&t, m.id, None, event(m.id, EventKind::Forgotten, None)).await.unwrap();
        m.superseded_at = Some(now());
    }

    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let filters = vec![
        all.clone(),
        MemoryFilter { pool: Some("agent:a".into()), ..all.clone() },
        MemoryFilter {
            pool: Some("cluster:c".into()),
            kinds: Some(vec![Kind::Knowledge]),
            ..all.clone()
        },
        MemoryFilter { kinds: Some(vec![Kind::Shared]), ..all.clone() },
        MemoryFilter { categories: Some(vec![Category::Fact, Category::Decision]), ..all.clone() },
        MemoryFilter {
            since: Some(base + Duration::days(10)),
            until: Some(base + Duration::days(20)),
            ..all.clone()
        },
        MemoryFilter {
            pool: Some("agent:b".into()),
            categories: Some(vec![Category::Preference]),
            since: Some(base + Duration::days(3)),
            ..all.clone()
        },
        MemoryFilter { categories: Some(vec![]), ..all.clone() },
    ];
    for qi in 0..5u64 {
        let q = unit(dims, qi);
        for f in &filters {
            for k in [1, 10, 1000] {
                let got = s.vector_search(&t, f, &q, k).await.unwrap();
                assert_top_k(&got, &rows, f, &q, k);
            }
        }
    }
    // include_superseded does not bring superseded rows into a vector search.
    let q = unit(dims, 7);
    let with = MemoryFilter { include_superseded: true, ..all.clone() };
    assert_eq!(
        s.vector_search(&t, &with, &q, 1000).await.unwrap(),
        s.vector_search(&t, &all, &q, 1000).await.unwrap()
    );
    // A non-unit query: scores are inner products (the cosine for unit vectors).
    let big: Vec<f32> = unit(dims, 3).iter().map(|x| x * 3.0).collect();
    let got = s.vector_search(&t, &all, &big, 5).await.unwrap();
    assert_top_k(&got, &rows, &all, &big, 5);
    // Degenerate input: never a panic.
    assert!(matches!(
        s.vector_search(&t, &MemoryFilter::default(), &q, 10).await,
        Err(Error::InvalidInput { .. })
    ));
    assert!(s.vector_search(&t, &all, &q, 0).await.unwrap().is_empty());
    assert!(s.vector_search(&t, &all, &normalize(vec![1.0; 5]), 10).await.unwrap().is_empty());
    assert!(s.vector_search(&t, &all, &[], 10).await.unwrap().is_empty());
    let nobody = MemoryFilter { user_id: Some(user("nobody")), ..Default::default() };
    assert!(s.vector_search(&t, &nobody, &q, 10).await.unwrap().is_empty());
}

/// A scope large enough that the SQLite store scans it off the request's thread (see
/// `sqlite::vectors::off_thread`): the top k of memories and of messages still equals a
/// brute-force scan, with a keyword search of the same scope run at the same time.
pub async fn vector_search_of_a_large_scope_equals_brute_force(s: Arc<dyn Store>) {
    let (t, u) = (tenant("t"), user("u"));
    let dims = 8;
    s.ensure_embedding_space(MODEL, dims).await.unwrap();
    let n = 4200u64; // over the 4,096 rows from which SQLite scans off the thread
    let rows: Vec<_> = (0..n)
        .map(|i| new_row(memory(&t, &u, &format!("memory {i}")), Some(unit(dims, i))))
        .collect();
    for chunk in rows.chunks(1000) {
        s.insert_memories(&t, chunk.to_vec()).await.unwrap();
    }
    let said: Vec<_> =
        (0..n).map(|i| message(&t, &u, "c", MessageRole::User, &format!("message {i}"))).collect();
    let mut stored = Vec::new();
    for chunk in said.chunks(1000) {
        stored.extend(s.append_messages(&t, chunk.to_vec()).await.unwrap());
    }
    let vectors: Vec<_> = stored.iter().zip(n..).map(|(m, i)| (m.id, unit(dims, i))).collect();
    s.set_message_vectors(&t, MODEL, vectors.clone()).await.unwrap();

    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let window = TranscriptFilter::user(u.clone());
    for seed in [7_000_001u64, 7_000_002, 7_000_003] {
        let q = unit(dims, seed);
        let (mems, msgs, words) = tokio::join!(
            s.vector_search(&t, &all, &q, 10),
            s.vector_search_messages(&t, &window, MODEL, &q, 10),
            s.text_search(&t, &all, "memory 42", 10),
        );
        let best = |scored: Vec<(String, f32)>| {
            let mut scored = scored;
            scored.sort_by(|a, b| b.1.total_cmp(&a.1));
            scored.into_iter().take(10).map(|x| x.0).collect::<Vec<_>>()
        };
        let want: Vec<_> = best(
            rows.iter()
                .map(|r| (r.memory.id.to_string(), dot(&q, r.vector.as_ref().unwrap())))
                .collect(),
        );
        let got: Vec<_> = mems.unwrap().iter().map(|h| h.0.to_string()).collect();
        assert_eq!(got, want, "memories, query {seed}");
        let want = best(vectors.iter().map(|(id, v)| (id.to_string(), dot(&q, v))).collect());
        let got: Vec<_> = msgs.unwrap().iter().map(|h| h.0.to_string()).collect();
        assert_eq!(got, want, "messages, query {seed}");
        assert_eq!(words.unwrap().first().map(|h| h.0), Some(rows[42].memory.id));
    }
}

async fn ids_of(
    s: &Arc<dyn Store>,
    t: &engram_core::model::TenantId,
    f: &MemoryFilter,
    q: &str,
) -> Vec<MemoryId> {
    let hits = s.text_search(t, f, q, 50).await.unwrap();
    assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1), "best first for {q:?}");
    assert!(
        hits.iter().all(|h| h.1.is_finite() && h.1 > 0.0),
        "higher is better, positive: {hits:?}"
    );
    hits.into_iter().map(|h| h.0).collect()
}

pub async fn text_search_keywords_any_language(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let texts = [
        "Alice works as a doctor in Berlin",
        "The user drinks green tea every morning",
        "Der Nutzer wohnt in München",
        "Пользователь живёт в Москве",
        "ユーザーは東京に住んでいます",
        "Bob's café is on the rue de Rivoli",
        "The user is allergic to peanuts",
        "The user prefers dark mode in the editor",
    ];
    let mut rows = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let mut m = memory(&t, &u, text);
        m.category = if i % 2 == 0 { Category::Fact } else { Category::Preference };
        rows.push(new_row(m, None));
    }
    s.insert_memories(&t, rows.clone()).await.unwrap();
    s.insert_memories(&t, vec![new_row(memory(&t, &user("v"), "Another doctor lives here"), None)])
        .await
        .unwrap();
    let id = |i: usize| rows[i].memory.id;
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };

    assert_eq!(ids_of(&s, &t, &all, "doctor").await, vec![id(0)]);
    assert_eq!(
        ids_of(&s, &t, &all, "Who is the DOCTOR?").await,
        vec![id(0)],
        "function words ignored"
    );
    assert_eq!(ids_of(&s, &t, &all, "what does the user drink? tea").await[0], id(1));
    assert_eq!(ids_of(&s, &t, &all, "münchen").await, vec![id(2)]);
    assert_eq!(ids_of(&s, &t, &all, "MUNCHEN").await, vec![id(2)], "diacritics and case folded");
    assert_eq!(ids_of(&s, &t, &all, "москве").await, vec![id(3)]);
    assert_eq!(ids_of(&s, &t, &all, "МОСКВЕ").await, vec![id(3)]);
    assert_eq!(ids_of(&s, &t, &all, "ユーザーは東京に住んでいます").await, vec![id(4)]);
    assert_eq!(ids_of(&s, &t, &all, "cafe").await, vec![id(5)]);
    assert_eq!(ids_of(&s, &t, &all, "Café?").await, vec![id(5)]);
    assert_eq!(ids_of(&s, &t, &all, "peanuts allergy").await, vec![id(6)]);
    // More matching terms rank higher.
    let hits = ids_of(&s, &t, &all, "user dark editor").await;
    assert_eq!(hits[0], id(7));
    assert_eq!(hits.iter().collect::<BTreeSet<_>>(), [id(1), id(6), id(7)].iter().collect());
    assert!(ids_of(&s, &t, &all, "zebra").await.is_empty());
    // Filters and scope.
    let prefs = MemoryFilter { categories: Some(vec![Category::Preference]), ..all.clone() };
    assert_eq!(
        ids_of(&s, &t, &prefs, "user").await.iter().collect::<BTreeSet<_>>(),
        [id(1), id(7)].iter().collect()
    );
    assert!(ids_of(&s, &t, &all, "another").await.is_empty(), "other users' rows");
    let tenant_wide = MemoryFilter::default();
    assert_eq!(s.text_search(&t, &tenant_wide, "doctor", 10).await.unwrap().len(), 2);
    assert!(s.text_search(&tenant("t2"), &tenant_wide, "doctor", 10).await.unwrap().is_empty());
    assert_eq!(s.text_search(&t, &all, "user", 1).await.unwrap().len(), 1);
    assert!(s.text_search(&t, &all, "user", 0).await.unwrap().is_empty());
    // Superseded rows only with include_superseded.
    s.supersede(&t, id(0), None, event(id(0), EventKind::Forgotten, None)).await.unwrap();
    assert!(ids_of(&s, &t, &all, "doctor").await.is_empty());
    let with = MemoryFilter { include_superseded: true, ..all.clone() };
    assert_eq!(ids_of(&s, &t, &with, "doctor").await, vec![id(0)]);

    // Messages: content and tool names, one user.
    let mut tool = message(&t, &u, "c1", MessageRole::Tool, "");
    tool.tool_name = Some("weather_lookup".into());
    let msgs = vec![
        message(&t, &u, "c1", MessageRole::User, "I love hiking in the Alps"),
        message(&t, &u, "c1", MessageRole::Assistant, "Hiking is great; the Alps are beautiful"),
        tool,
    ];
    let stored = s.append_messages(&t, msgs).await.unwrap();
    s.append_messages(&t, vec![message(&t, &user("v"), "c2", MessageRole::User, "hiking too")])
        .await
        .unwrap();
    let filler = (0..4)
        .map(|i| message(&t, &user("w"), "c3", MessageRole::User, &format!("lorem ipsum {i}")));
    s.append_messages(&t, filler.collect()).await.unwrap();
    let hits =
        s.text_search_messages(&t, &TranscriptFilter::user(u.clone()), "hiking", 10).await.unwrap();
    assert_eq!(
        hits[..2].iter().map(|h| h.0).collect::<BTreeSet<_>>(),
        [stored[0].id, stored[1].id].into_iter().collect()
    );
    // The tool row follows them in the conversation: found through its context, last, with
    // none of the query's weight in its own words.
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert_eq!(hits[2], (stored[2].id, 0.0));
    let hits = s
        .text_search_messages(&t, &TranscriptFilter::user(u.clone()), "weather", 10)
        .await
        .unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![stored[2].id]);
    assert!(s.set_message_content(&t, stored[2].id, "Sunny in Zermatt").await.unwrap());
    let hits = s
        .text_search_messages(&t, &TranscriptFilter::user(u.clone()), "zermatt", 10)
        .await
        .unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![stored[2].id]);
    assert!(
        s.text_search_messages(&t, &TranscriptFilter::user(user("w")), "hiking", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn text_search_drops_common_terms(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let words = ["apple", "banana", "cherry", "damson", "elderberry", "fig"];
    let rows: Vec<_> = words
        .iter()
        .map(|w| new_row(memory(&t, &u, &format!("engram remembers {w}")), None))
        .collect();
    s.insert_memories(&t, rows.clone()).await.unwrap();
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    // "engram" and "remembers" are in every row: no information, dropped beside a word
    // that tells rows apart; alone they are the query, and every row holds it.
    assert_eq!(ids_of(&s, &t, &all, "engram").await.len(), 6);
    assert_eq!(ids_of(&s, &t, &all, "engram remembers").await.len(), 6);
    assert_eq!(ids_of(&s, &t, &all, "engram fig").await, vec![rows[5].memory.id]);
    assert_eq!(ids_of(&s, &t, &all, "Fig, cherry").await.len(), 2);
}

/// The rows of one scope a keyword query matches, with their coverage, in id order (the
/// order of equal-scored rows is not part of the contract).
async fn matches(
    s: &Arc<dyn Store>,
    t: &engram_core::model::TenantId,
    f: &MemoryFilter,
    q: &str,
) -> Vec<(MemoryId, f64)> {
    let mut hits = s.text_search(t, f, q, 50).await.unwrap();
    hits.sort_by_key(|h| h.0);
    hits
}

/// What other users and tenants write never changes which of a scope's rows a keyword
/// query matches, nor the coverage they get: a word is dropped as uninformative when it is
/// in half the rows of the searched scope (the user, or for memories the whole tenant when
/// no user is named), never of the store. Found by a session on SQLite, which counted over
/// every tenant: "kayak" stopped finding user a's fact once user b had six about kayaks.
pub async fn keyword_matches_never_depend_on_other_scopes(s: Arc<dyn Store>) {
    let (t, t2, a) = (tenant("t"), tenant("t2"), user("a"));
    let facts = [
        "I bought a red kayak last spring",
        "My sister lives in Lyon",
        "I work night shifts at the hospital",
        "Tea in the morning, never coffee",
    ];
    let rows: Vec<_> = facts.iter().map(|f| new_row(memory(&t, &a, f), None)).collect();
    s.insert_memories(&t, rows.clone()).await.unwrap();
    let said = facts.iter().map(|f| message(&t, &a, "ca", MessageRole::User, f)).collect();
    let said = s.append_messages(&t, said).await.unwrap();
    let only_a = MemoryFilter { user_id: Some(a.clone()), ..Default::default() };
    let tenant_wide = MemoryFilter::default();
    let a_msgs = TranscriptFilter::user(a.clone());
    let seen = async || {
        let mut msgs = s.text_search_messages(&t, &a_msgs, "kayak spring", 50).await.unwrap();
        msgs.sort_by_key(|h| h.0);
        (
            matches(&s, &t, &only_a, "kayak spring").await,
            matches(&s, &t, &tenant_wide, "kayak spring").await,
            msgs,
        )
    };
    let before = seen().await;
    assert_eq!(before.0.iter().map(|h| h.0).collect::<Vec<_>>(), vec![rows[0].memory.id]);
    assert_eq!(before.0[0].1, 1.0, "both words are a's: {before:?}");
    assert_eq!(before.1, before.0, "a is the tenant's only user");
    assert!(before.2.contains(&(said[0].id, 1.0)), "{before:?}");

    // Kayaks everywhere: first in another tenant, then for another user of the same tenant.
    let kayaks: Vec<String> = (0..8).map(|i| format!("Kayak trip {i} in spring")).collect();
    for (tt, u) in [(&t2, user("a")), (&t, user("b"))] {
        let mine = kayaks.iter().map(|k| new_row(memory(tt, &u, k), None)).collect();
        s.insert_memories(tt, mine).await.unwrap();
        let said = kayaks.iter().map(|k| message(tt, &u, "cb", MessageRole::User, k)).collect();
        s.append_messages(tt, said).await.unwrap();
        let now = seen().await;
        assert_eq!(now.0, before.0, "user a's memories, after {tt}/{u} wrote: {now:?}");
        assert_eq!(now.2, before.2, "user a's messages, after {tt}/{u} wrote: {now:?}");
        if tt == &t2 {
            assert_eq!(now.1, before.1, "tenant t, after tenant t2 wrote: {now:?}");
        }
    }
    // Within the searched scope the rule still holds: tenant t as a whole now has "kayak"
    // and "spring" in 9 of its 12 memories, so beside a word of one row both are dropped.
    let lyon = matches(&s, &t, &tenant_wide, "kayak spring Lyon").await;
    assert_eq!(lyon.iter().map(|h| h.0).collect::<Vec<_>>(), vec![rows[1].memory.id]);
    assert!(lyon[0].1 > 0.99, "Lyon holds nearly all the weight: {lyon:?}");
    let only_a_lyon = matches(&s, &t, &only_a, "kayak spring Lyon").await;
    assert_eq!(only_a_lyon.len(), 2, "for user a alone kayak is informative: {only_a_lyon:?}");
}

/// A query made only of words that most of the scope's rows hold asks for those rows: the
/// drop of common words (which keeps a stray "user" from ranking every fact) applies
/// beside other words, never to all of the query's. Found by a session: a user whose dog Miso is in four of five facts got
/// nothing for "Miso", even in keyword mode; so did a search of summaries that all name it.
pub async fn a_query_of_common_words_alone_finds_their_rows(s: Arc<dyn Store>) {
    let (t, u) = (tenant("t"), user("u"));
    let facts = [
        "Miso is the user's beagle",
        "The user walks Miso every morning",
        "Miso is afraid of thunder",
        "The user bought Miso a red collar",
        "The user works as a nurse",
    ];
    let rows: Vec<_> = facts.iter().map(|f| new_row(memory(&t, &u, f), None)).collect();
    s.insert_memories(&t, rows.clone()).await.unwrap();
    let said = facts.iter().map(|f| message(&t, &u, "c", MessageRole::User, f)).collect();
    let said = s.append_messages(&t, said).await.unwrap();
    let mine = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    // `matches` lists hits in id order.
    let mut want: Vec<_> = rows[..4].iter().map(|r| r.memory.id).collect();
    want.sort();
    for filter in [mine.clone(), MemoryFilter::default()] {
        let hits = matches(&s, &t, &filter, "Miso").await;
        let got: Vec<_> = hits.iter().map(|h| h.0).collect();
        assert_eq!(got, want, "every fact naming Miso ({filter:?}): {hits:?}");
        assert!(hits.iter().all(|h| h.1 == 1.0), "each holds the whole query: {hits:?}");
    }
    let transcript = TranscriptFilter::user(u.clone());
    let msgs = s.text_search_messages(&t, &transcript, "miso", 50).await.unwrap();
    // The four that name Miso, wholly; the fifth only through its context (the two
    // messages before it), which counts for its rank but not its coverage.
    let named: Vec<_> = msgs.iter().filter(|h| h.1 == 1.0).map(|h| h.0).collect();
    assert_eq!(named.len(), 4, "the messages naming Miso: {msgs:?}");
    assert!(named.iter().all(|id| said[..4].iter().any(|m| m.id == *id)), "{msgs:?}");
    assert!(msgs.iter().all(|h| h.1 == 1.0 || (h.0 == said[4].id && h.1 == 0.0)), "{msgs:?}");
    // A common word beside an informative one is still dropped: "nurse" alone matches.
    let nurse = matches(&s, &t, &mine, "Miso nurse").await;
    assert_eq!(nurse.iter().map(|h| h.0).collect::<Vec<_>>(), vec![rows[4].memory.id]);
    // Beside a word no row holds it is dropped too: that query is about something else.
    assert!(matches(&s, &t, &mine, "Miso xylophone").await.is_empty());
}

pub async fn text_search_matches_word_forms(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    let texts = [
        "The user painted a sunrise over the lake",
        "The user paints every weekend",
        "The user has a pain in the knee",
        "The user bought tickets for 12345 Main Street",
        "The user likes modern art",
        "Пользователь живёт в Москве",
        "The user owns a car",
        "Der Nutzer arbeitet in einer Bäckerei",
        "The user keeps a paper diary",
        "The user walks the dog",
    ];
    let rows: Vec<_> = texts.iter().map(|x| new_row(memory(&t, &u, x), None)).collect();
    s.insert_memories(&t, rows.clone()).await.unwrap();
    let id = |i: usize| rows[i].memory.id;
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let set = |v: Vec<MemoryId>| v.into_iter().collect::<BTreeSet<_>>();

    // A long word matches the forms sharing its first letters (all but the last three).
    assert_eq!(
        set(ids_of(&s, &t, &all, "painting").await),
        set(vec![id(0), id(1)]),
        "painting → paint* → painted, paints"
    );
    assert_eq!(
        set(ids_of(&s, &t, &all, "When did the user paint?").await),
        set(vec![id(0), id(1), id(2)]),
        "paint → painted, paints (and pain: a 4-letter stem matches like a word)"
    );
    assert_eq!(ids_of(&s, &t, &all, "Moskau? москва").await, vec![id(5)], "any script");
    assert_eq!(ids_of(&s, &t, &all, "arbeiten").await, vec![id(7)]);
    assert_eq!(ids_of(&s, &t, &all, "BACKEREIEN").await, vec![id(7)], "folded, then cut");
    assert_eq!(ids_of(&s, &t, &all, "walking").await, vec![id(9)]);
    // A word of four letters matches its longer forms as well ("walk" → walks; "pain" →
    // pain, painted, paints), with no cut.
    assert_eq!(ids_of(&s, &t, &all, "walk").await, vec![id(9)]);
    assert_eq!(set(ids_of(&s, &t, &all, "pain").await), set(vec![id(0), id(1), id(2)]));
    // Shorter words, and numbers, match only themselves.
    assert!(ids_of(&s, &t, &all, "artist").await.is_empty(), "arti* matches no word");
    assert_eq!(ids_of(&s, &t, &all, "art").await, vec![id(4)]);
    assert!(ids_of(&s, &t, &all, "cars").await.is_empty(), "cars* matches no word");
    assert!(ids_of(&s, &t, &all, "12349").await.is_empty());
    assert_eq!(ids_of(&s, &t, &all, "12345").await, vec![id(3)]);
    assert!(ids_of(&s, &t, &all, "pap").await.is_empty(), "no prefix for short words");

    // Words of any length (PostgreSQL's per-user index keeps the first 500 characters of a
    // word and matches longer query terms another way): a 600-character word is found
    // whole, and through its first 450 or 200 characters.
    let v = user("v");
    let long = "abcdefghij".repeat(60);
    // Words with a digit match only whole.
    let code = "a1".repeat(300);
    let rows: Vec<_> = [
        format!("a token {long} here"),
        code.clone(),
        long[..300].into(),
        code[..500].into(),
        "filler one".into(),
        "filler two".into(),
        "filler three".into(),
        "filler four".into(),
    ]
    .iter()
    .map(|x| new_row(memory(&t, &v, x), None))
    .collect();
    s.insert_memories(&t, rows.clone()).await.unwrap();
    let id = |i: usize| rows[i].memory.id;
    let all = MemoryFilter { user_id: Some(v.clone()), ..Default::default() };
    assert_eq!(ids_of(&s, &t, &all, &long).await, vec![id(0)]);
    assert_eq!(ids_of(&s, &t, &all, &long[..450]).await, vec![id(0)]);
    assert_eq!(set(ids_of(&s, &t, &all, &long[..200]).await), set(vec![id(0), id(2)]));
    assert_eq!(ids_of(&s, &t, &all, &code).await, vec![id(1)]);
    assert_eq!(ids_of(&s, &t, &all, &code[..500]).await, vec![id(3)]);
    assert!(ids_of(&s, &t, &all, &code[..498]).await.is_empty());
}

pub async fn text_search_never_a_syntax_error(s: Arc<dyn Store>) {
    let t = tenant("t");
    let u = user("u");
    s.insert_memories(
        &t,
        vec![new_row(memory(&t, &u, "The user likes NEAR field AND bits OR stars*"), None)],
    )
    .await
    .unwrap();
    s.append_messages(&t, vec![message(&t, &u, "c", MessageRole::User, "some words")])
        .await
        .unwrap();
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let queries = [
        "",
        "   ",
        "\"",
        "\"unbalanced",
        "NEAR(a b)",
        "a AND OR NOT b",
        "*",
        "stars*",
        "col:val",
        "'; DROP TABLE memories; --",
        "((",
        ")",
        "^",
        "🙂🙂",
        "\\",
        "a''b",
        "x & y | !z",
        "<->",
        ":*",
        "near/2",
        "-",
        "+x -y",
        "{a}",
        "[a]",
        "\u{0}",
        "a\u{0}b",
        "ﷺ",
        "x\u{301}",
        "\u{200b}",
        "’",
        "1e10",
        "0x1F",
        "NULL",
        "%",
        "_",
        "$1",
        "?",
    ];
    for q in queries {
        let r = s.text_search(&t, &all, q, 10).await;
        assert!(r.is_ok(), "text_search({q:?}): {r:?}");
        let r = s.text_search_messages(&t, &TranscriptFilter::user(u.clone()), q, 10).await;
        assert!(r.is_ok(), "text_search_messages({q:?}): {r:?}");
    }
    let long = "word ".repeat(5000);
    assert!(s.text_search(&t, &all, &long, 10).await.is_ok());
    assert_eq!(s.text_search(&t, &all, "near AND stars", 10).await.unwrap().len(), 1);
}

/// The ids of a message search of `u`, best first, each with its coverage.
async fn message_hits(
    s: &Arc<dyn Store>,
    t: &engram_core::model::TenantId,
    u: &engram_core::model::UserId,
    q: &str,
) -> Vec<(engram_core::model::MessageId, f64)> {
    s.text_search_messages(t, &TranscriptFilter::user(u.clone()), q, 10).await.unwrap()
}

/// A message is keyword-indexed with the two messages before it in its conversation, weighed
/// below its own words: a short answer is found by the words of the question, under the
/// question itself, with no coverage of its own. The index follows a message filled later,
/// a restore in any row order, and erasure.
pub async fn messages_are_found_by_their_context(s: Arc<dyn Store>) {
    use engram_core::store::{BackupRow, BackupScope, RestoreState};
    let t = tenant("t");
    let u = user("u");
    let talk = [
        (MessageRole::User, "Did you ever visit the Grand Canyon?"),
        (MessageRole::Assistant, "Yes, last Saturday with my sister."),
        (MessageRole::User, "How was the weather there?"),
        (MessageRole::Assistant, "Sunny and warm all day."),
    ];
    let c1 = s
        .append_messages(&t, talk.iter().map(|(r, x)| message(&t, &u, "c1", *r, x)).collect())
        .await
        .unwrap();
    // Filler of the same user, so that no word is in half of the rows.
    let filler = (0..6).map(|i| message(&t, &u, "c2", MessageRole::User, &format!("lorem {i}")));
    s.append_messages(&t, filler.collect()).await.unwrap();
    let ids =
        |h: &[(engram_core::model::MessageId, f64)]| h.iter().map(|x| x.0).collect::<Vec<_>>();

    let hits = message_hits(&s, &t, &u, "grand canyon").await;
    assert_eq!(ids(&hits), vec![c1[0].id, c1[1].id, c1[2].id], "{hits:?}");
    assert!(hits[0].1 > 0.99, "the question holds every word: {hits:?}");
    assert_eq!((hits[1].1, hits[2].1), (0.0, 0.0), "context is no coverage: {hits:?}");
    // The answer's own word first, then the two after it.
    let sister = |h: Vec<(engram_core::model::MessageId, f64)>| {
        let ids = ids(&h);
        (ids[0], ids[1..].iter().copied().collect::<BTreeSet<_>>())
    };
    let after_answer: BTreeSet<_> = [c1[2].id, c1[3].id].into_iter().collect();
    assert_eq!(sister(message_hits(&s, &t, &u, "sister").await), (c1[1].id, after_answer.clone()));
    // Two messages back at most.
    assert!(message_hits(&s, &t, &u, "visit").await.iter().all(|h| h.0 != c1[3].id));

    // A tool row filled in later (its synthesized sentence): the answer after it is found
    // by the sentence's words from then on.
    let mut tool = message(&t, &u, "c3", MessageRole::Tool, "");
    tool.tool_name = Some("flight_search".into());
    let c3 = s
        .append_messages(
            &t,
            vec![tool, message(&t, &u, "c3", MessageRole::Assistant, "I booked it for you.")],
        )
        .await
        .unwrap();
    assert!(message_hits(&s, &t, &u, "lisbon").await.is_empty());
    assert_eq!(
        ids(&message_hits(&s, &t, &u, "flight search").await),
        vec![c3[0].id, c3[1].id],
        "the tool name is the answer's context too"
    );
    assert!(s.set_message_content(&t, c3[0].id, "Flight TP123 to Lisbon on May 3").await.unwrap());
    let hits = message_hits(&s, &t, &u, "lisbon").await;
    assert_eq!(ids(&hits), vec![c3[0].id, c3[1].id], "{hits:?}");
    assert_eq!(hits[1].1, 0.0);

    // Restored into another tenant with the messages in reverse order: each row's context is
    // still the two messages before it.
    let mut rows: Vec<BackupRow> = Vec::new();
    s.backup(&BackupScope::Tenant(t.clone()), &mut |r| {
        rows.push(r);
        Ok(())
    })
    .await
    .unwrap();
    let at: Vec<usize> = (0..rows.len()).filter(|i| rows[*i].table == "messages").collect();
    let mut msgs: Vec<BackupRow> = at.iter().map(|i| rows[*i].clone()).collect();
    msgs.reverse();
    for (i, m) in at.iter().zip(msgs) {
        rows[*i] = m;
    }
    let t2 = tenant("t2");
    let mut state = RestoreState { target: Some(t2.clone()), ..Default::default() };
    s.restore(&rows, &mut state).await.unwrap();
    for q in ["grand canyon", "sister", "weather", "lisbon"] {
        assert_eq!(
            ids(&message_hits(&s, &t2, &u, q).await),
            ids(&message_hits(&s, &t, &u, q).await),
            "restored: {q}"
        );
    }

    // Erased: nothing of the user is left in the index, even for the rows that take the
    // erased ones' places.
    s.erase_user(&t2, &u).await.unwrap();
    let w = user("w");
    let mut after: Vec<_> =
        (0..12).map(|i| message(&t2, &w, "c9", MessageRole::User, &format!("ipsum {i}"))).collect();
    after[3].content = "A quokka sighting".into();
    s.append_messages(&t2, after.clone()).await.unwrap();
    for q in ["grand canyon", "sister", "lisbon", "flight"] {
        assert!(message_hits(&s, &t2, &w, q).await.is_empty(), "{q}");
        assert!(message_hits(&s, &t2, &u, q).await.is_empty(), "{q}");
    }
    assert_eq!(ids(&message_hits(&s, &t2, &w, "quokka").await)[0], after[3].id);
    assert_eq!(sister(message_hits(&s, &t, &u, "sister").await), (c1[1].id, after_answer));
}

/// A query word that matches nothing in the scope finds the scope's words one edit away (two
/// for long words), in memories and messages alike; another user's words are never the
/// correction, and words that match as written are not corrected.
pub async fn keyword_search_forgives_a_typo(s: Arc<dyn Store>) {
    let t = tenant("t");
    let (u, w) = (user("u"), user("w"));
    let texts = [
        "The user works as a nurse at the city hospital",
        "The user found accommodation in Lisbon",
        "The user plays the accordion",
        "The user keeps a nursery of orchids",
    ];
    let rows: Vec<_> = texts.iter().map(|x| new_row(memory(&t, &u, x), None)).collect();
    s.insert_memories(&t, rows.clone()).await.unwrap();
    let theirs = new_row(memory(&t, &w, "The user collects vintage typewriters"), None);
    s.insert_memories(&t, vec![theirs.clone()]).await.unwrap();
    let id = |i: usize| rows[i].memory.id;
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    // Found as the word spelled right would find them ("nurse" → `nurs*`: nurse, nursery).
    let set = |v: Vec<MemoryId>| v.into_iter().collect::<BTreeSet<_>>();
    let nurse = set(ids_of(&s, &t, &all, "nurse").await);
    assert_eq!(nurse, set(vec![id(0), id(3)]));
    assert_eq!(set(ids_of(&s, &t, &all, "nurce").await), nurse, "one letter wrong");
    assert_eq!(ids_of(&s, &t, &all, "Which hosiptal?").await, vec![id(0)], "two letters swapped");
    assert_eq!(ids_of(&s, &t, &all, "accomodation").await, vec![id(1)], "one letter missing");
    assert_eq!(ids_of(&s, &t, &all, "acommodattion").await, vec![id(1)], "two in a long word");
    assert!(ids_of(&s, &t, &all, "acordeon").await.is_empty(), "two in a short word: no");
    assert_eq!(ids_of(&s, &t, &all, "orchids").await, vec![id(3)], "spelled right: as written");
    assert!(ids_of(&s, &t, &all, "typewritter").await.is_empty(), "only the user's own words");
    let theirs_filter = MemoryFilter { user_id: Some(w.clone()), ..Default::default() };
    assert_eq!(ids_of(&s, &t, &theirs_filter, "typewritter").await, vec![theirs.memory.id]);
    assert!(ids_of(&s, &t, &all, "quantum chromodynamics").await.is_empty());
    // An agent's view (a pool) reads no other pool's words: nothing is corrected for it.
    let pooled = MemoryFilter { pool: Some("bot".into()), ..all.clone() };
    assert!(s.text_search(&t, &pooled, "nurce", 10).await.unwrap().is_empty());
    // A forgotten fact's words neither block a correction nor are one.
    let gone = new_row(memory(&t, &u, "The user once visited Belgrade"), None);
    s.insert_memories(&t, vec![gone.clone()]).await.unwrap();
    let away = new_row(memory(&t, &u, "The user grew up in Bexgrade"), None);
    s.insert_memories(&t, vec![away.clone()]).await.unwrap();
    let forgot = crate::harness::event(gone.memory.id, EventKind::Forgotten, None);
    s.supersede(&t, gone.memory.id, None, forgot).await.unwrap();
    assert_eq!(ids_of(&s, &t, &all, "Belgrade").await, vec![away.memory.id]);
    // One correction per word, whatever the number of near words: it weighs as the word
    // spelled right would (0.7 of it, a guess).
    for name in ["Kavrin", "Kabrin", "Kabrin", "Kadrin"] {
        let row = new_row(memory(&t, &w, &format!("The user met {name}")), None);
        s.insert_memories(&t, vec![row]).await.unwrap();
    }
    let hits = s.text_search(&t, &theirs_filter, "Kaxrin", 10).await.unwrap();
    assert_eq!(hits.len(), 2, "the two rows of the word most rows hold: {hits:?}");
    assert!(hits.iter().all(|h| (h.1 - 0.7).abs() < 1e-9), "{hits:?}");
    // A row holding the words as written keeps that support when another word is corrected.
    let mixed = s.text_search(&t, &all, "orchids nurce", 10).await.unwrap();
    let orchids = mixed.iter().find(|h| h.0 == id(3)).expect("the orchids row").1;
    let as_written = s.text_search(&t, &all, "orchids zqxwvbnm", 10).await.unwrap();
    assert!(orchids >= as_written[0].1 - 1e-9, "{mixed:?} {as_written:?}");

    let stored = s
        .append_messages(
            &t,
            vec![
                message(&t, &u, "c1", MessageRole::User, "We booked the accommodation today"),
                message(&t, &u, "c1", MessageRole::Assistant, "Enjoy Lisbon!"),
            ],
        )
        .await
        .unwrap();
    let hits = s
        .text_search_messages(&t, &TranscriptFilter::user(u.clone()), "accomodation", 10)
        .await
        .unwrap();
    // All of the corrected query's weight, counted as a guess (0.7).
    assert_eq!(hits.first().map(|h| h.0), Some(stored[0].id), "{hits:?}");
    assert!((hits[0].1 - 0.7).abs() < 1e-9, "{hits:?}");
    // A caller who sees some of the user's conversations only (an agent's pool) gets no
    // correction: it would read the other conversations' words.
    let pooled = TranscriptFilter { pooled: true, ..TranscriptFilter::user(u.clone()) };
    assert!(s.text_search_messages(&t, &pooled, "accomodation", 10).await.unwrap().is_empty());
    // Spelled right, the same message holds all of the query's weight.
    let right = s
        .text_search_messages(&t, &TranscriptFilter::user(u.clone()), "accommodation", 10)
        .await
        .unwrap();
    assert_eq!(right.first(), Some(&(stored[0].id, 1.0)));
}
