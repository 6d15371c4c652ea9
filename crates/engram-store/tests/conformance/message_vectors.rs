//! Transcript-message vectors: which messages still need one, storing them (tenant-scoped),
//! exact vector search over a user's messages, and what erasure and stats see of them.
//!
//! Like the engine (`Engine::embed_conversation`), every test records the store's embedding
//! space before storing message vectors; vectors of another model appear only as a re-embed
//! in progress writes them (before it resets the space).

use std::collections::BTreeSet;
use std::sync::Arc;

use engram_core::model::{ConversationId, Message, MessageId, MessageRole, TenantId, UserId};
use engram_core::store::TranscriptFilter;
use engram_core::store::prelude::*;

use crate::harness::{MODEL, dot, memory, message, new_row, normalize, tenant, unit, user};

/// The model of a re-embed in progress (another model, another dimension).
const MODEL_6: &str = "test-model-6d";

fn conv(s: &str) -> ConversationId {
    ConversationId::parse(s).unwrap()
}

/// Append `(role, content)` messages of `u` to conversation `c` of `t`; the stored messages.
async fn append(
    s: &Arc<dyn Store>,
    t: &TenantId,
    u: &UserId,
    c: &str,
    items: &[(MessageRole, &str)],
) -> Vec<Message> {
    let batch = items.iter().map(|(role, text)| message(t, u, c, *role, text)).collect();
    s.append_messages(t, batch).await.unwrap()
}

fn id_seq(ms: &[&Message]) -> Vec<(MessageId, i64)> {
    ms.iter().map(|m| (m.id, m.seq)).collect()
}

async fn needing(
    s: &Arc<dyn Store>,
    t: &TenantId,
    c: &str,
    model: &str,
    limit: usize,
) -> Vec<(MessageId, i64)> {
    s.messages_needing_vectors(t, &conv(c), model, limit).await.unwrap()
}

async fn convs_needing(s: &Arc<dyn Store>, t: &TenantId, model: &str) -> BTreeSet<String> {
    let got = s.conversations_needing_message_vectors(t, model, 100).await.unwrap();
    let set: BTreeSet<String> = got.iter().map(|c| c.as_str().to_string()).collect();
    assert_eq!(set.len(), got.len(), "each conversation once: {got:?}");
    set
}

fn names(cs: &[&str]) -> BTreeSet<String> {
    cs.iter().map(|c| c.to_string()).collect()
}

/// The ids of a search, best first.
async fn search_ids(
    s: &Arc<dyn Store>,
    t: &TenantId,
    u: &UserId,
    model: &str,
    q: &[f32],
    k: usize,
) -> Vec<MessageId> {
    let hits =
        s.vector_search_messages(t, &TranscriptFilter::user(u.clone()), model, q, k).await.unwrap();
    hits.into_iter().map(|h| h.0).collect()
}

/// The messages that need a vector, in `seq` order, per model; empty messages (a tool call
/// awaiting its description) only once they have content; and the conversations that have
/// such messages, per tenant.
pub async fn message_vectors_needed_by_seq_and_model(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let u = user("u");
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let c1 = append(
        &s,
        &t,
        &u,
        "c1",
        &[
            (MessageRole::User, "What's the weather in Paris?"),
            (MessageRole::Assistant, "Let me check."),
            (MessageRole::Tool, ""),
            (MessageRole::Assistant, "It is sunny."),
        ],
    )
    .await;
    let c1_more = append(&s, &t, &u, "c1", &[(MessageRole::User, "Thanks")]).await;
    let c1: Vec<&Message> = c1.iter().chain(&c1_more).collect();
    let c2 = append(&s, &t, &u, "c2", &[(MessageRole::User, "Hello")]).await;
    // A conversation holding only a tool call awaiting its description.
    append(&s, &t, &u, "c3", &[(MessageRole::Tool, "")]).await;
    // The same conversation id in another tenant.
    let other = append(&s, &t2, &u, "c1", &[(MessageRole::User, "Elsewhere")]).await;

    let text = [c1[0], c1[1], c1[3], c1[4]];
    assert_eq!(needing(&s, &t, "c1", MODEL, 100).await, id_seq(&text), "by seq, no empty");
    assert_eq!(needing(&s, &t, "c1", MODEL, 2).await, id_seq(&text[..2]), "limit");
    assert_eq!(needing(&s, &t, "c3", MODEL, 100).await, vec![], "an empty message waits");
    assert_eq!(needing(&s, &t, "nope", MODEL, 100).await, vec![], "unknown conversation");
    assert_eq!(needing(&s, &t2, "c1", MODEL, 100).await, id_seq(&[&other[0]]), "per tenant");
    assert_eq!(convs_needing(&s, &t, MODEL).await, names(&["c1", "c2"]));
    assert_eq!(convs_needing(&s, &t2, MODEL).await, names(&["c1"]));
    assert_eq!(s.conversations_needing_message_vectors(&t, MODEL, 1).await.unwrap().len(), 1);
    assert!(convs_needing(&s, &tenant("nobody"), MODEL).await.is_empty());

    // Vectors of the model end the listing of those messages, for that model only.
    s.set_message_vectors(&t, MODEL, vec![(c1[0].id, unit(4, 1)), (c1[3].id, unit(4, 2))])
        .await
        .unwrap();
    assert_eq!(needing(&s, &t, "c1", MODEL, 100).await, id_seq(&[c1[1], c1[4]]));
    assert_eq!(needing(&s, &t, "c1", MODEL, 1).await, id_seq(&[c1[1]]));
    assert_eq!(needing(&s, &t, "c1", MODEL_6, 100).await, id_seq(&text), "another model");
    assert_eq!(needing(&s, &t2, "c1", MODEL, 100).await, id_seq(&[&other[0]]));
    assert_eq!(s.stats(&t).await.unwrap().messages_with_vector, 2);

    // The tool call gets its description: now it needs a vector, in its place.
    assert!(s.set_message_content(&t, c1[2].id, "Sunny, 24 °C.").await.unwrap());
    assert_eq!(needing(&s, &t, "c1", MODEL, 100).await, id_seq(&[c1[1], c1[2], c1[4]]));

    // The rest of c1 and c2: only c3's empty message is left, which needs nothing.
    let rest = [c1[1].id, c1[2].id, c1[4].id, c2[0].id];
    s.set_message_vectors(
        &t,
        MODEL,
        rest.iter().zip(3..).map(|(id, i)| (*id, unit(4, i))).collect(),
    )
    .await
    .unwrap();
    assert_eq!(needing(&s, &t, "c1", MODEL, 100).await, vec![]);
    assert!(convs_needing(&s, &t, MODEL).await.is_empty());
    assert_eq!(convs_needing(&s, &t2, MODEL).await, names(&["c1"]), "other tenant untouched");
    let st = s.stats(&t).await.unwrap();
    assert_eq!((st.messages, st.messages_with_vector), (7, 6));
    assert_eq!(s.stats(&t2).await.unwrap().messages_with_vector, 0);

    // A re-embed with another model lists everything again, and a message re-embedded by
    // it is listed again for the first model.
    assert_eq!(needing(&s, &t, "c1", MODEL_6, 100).await.len(), 5);
    assert_eq!(convs_needing(&s, &t, MODEL_6).await, names(&["c1", "c2"]));
    s.set_message_vectors(&t, MODEL_6, vec![(c1[4].id, unit(6, 9))]).await.unwrap();
    assert_eq!(needing(&s, &t, "c1", MODEL_6, 100).await, id_seq(&[c1[0], c1[1], c1[2], c1[3]]));
    assert_eq!(needing(&s, &t, "c1", MODEL, 100).await, id_seq(&[c1[4]]));
    assert_eq!(convs_needing(&s, &t, MODEL).await, names(&["c1"]));
}

/// A batch larger than one statement's share (the SQLite store writes 64 rows per
/// statement): every vector lands on its own message, another tenant's id and an unknown
/// one in the middle are skipped, and nothing of the batch is lost at a chunk's edge.
pub async fn message_vectors_set_many_in_one_call(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let u = user("u");
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let texts: Vec<String> = (0..150).map(|i| format!("message {i}")).collect();
    let items: Vec<(MessageRole, &str)> =
        texts.iter().map(|x| (MessageRole::User, x.as_str())).collect();
    let mine = append(&s, &t, &u, "c", &items).await;
    let theirs = append(&s, &t2, &u, "c", &[(MessageRole::User, "theirs")]).await;
    let mut rows: Vec<(MessageId, Vec<f32>)> =
        mine.iter().zip(100..).map(|(m, seed)| (m.id, unit(4, seed))).collect();
    rows.insert(63, (theirs[0].id, unit(4, 1)));
    rows.insert(100, (MessageId::new(), unit(4, 2)));
    s.set_message_vectors(&t, MODEL, rows.clone()).await.unwrap();

    assert_eq!(needing(&s, &t, "c", MODEL, 200).await, vec![], "every message has its vector");
    assert_eq!(needing(&s, &t2, "c", MODEL, 10).await, id_seq(&[&theirs[0]]));
    assert_eq!(s.stats(&t).await.unwrap().messages_with_vector, 150);
    let q = unit(4, 7);
    let ids: Vec<MessageId> = mine.iter().map(|m| m.id).collect();
    let got: std::collections::HashMap<MessageId, f32> =
        s.message_similarities(&t, MODEL, &q, &ids).await.unwrap().into_iter().collect();
    assert_eq!(got.len(), 150);
    for (id, v) in rows.iter().filter(|(id, _)| ids.contains(id)) {
        assert!((got[id] - dot(&q, v)).abs() < 1e-5, "{id:?}: {} against {}", got[id], dot(&q, v));
    }
    // The search ranks them by their own vectors.
    let best = rows
        .iter()
        .filter(|(id, _)| ids.contains(id))
        .max_by(|a, b| dot(&q, &a.1).total_cmp(&dot(&q, &b.1)));
    assert_eq!(search_ids(&s, &t, &u, MODEL, &q, 1).await, vec![best.unwrap().0]);
}

/// Storing message vectors never crosses tenants, skips unknown ids, and replaces a vector.
pub async fn message_vectors_set_per_tenant(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let u = user("u");
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let mine = append(&s, &t, &u, "c", &[(MessageRole::User, "a"), (MessageRole::User, "b")]).await;
    let theirs = append(&s, &t2, &u, "c", &[(MessageRole::User, "c")]).await;
    let q = unit(4, 1);

    // t2 naming t's message (same user and conversation ids) changes nothing anywhere.
    s.set_message_vectors(&t2, MODEL, vec![(mine[0].id, q.clone())]).await.unwrap();
    assert_eq!(needing(&s, &t, "c", MODEL, 10).await, id_seq(&[&mine[0], &mine[1]]));
    assert!(search_ids(&s, &t, &u, MODEL, &q, 10).await.is_empty());
    assert!(search_ids(&s, &t2, &u, MODEL, &q, 10).await.is_empty());
    assert_eq!(s.stats(&t).await.unwrap().messages_with_vector, 0);
    assert_eq!(s.stats(&t2).await.unwrap().messages_with_vector, 0);

    // Unknown (or erased) ids are skipped; the rest of the batch is stored.
    s.set_message_vectors(&t, MODEL, vec![]).await.unwrap();
    s.set_message_vectors(
        &t,
        MODEL,
        vec![(MessageId::new(), unit(4, 5)), (mine[1].id, q.clone()), (theirs[0].id, q.clone())],
    )
    .await
    .unwrap();
    assert_eq!(needing(&s, &t, "c", MODEL, 10).await, id_seq(&[&mine[0]]));
    assert_eq!(needing(&s, &t2, "c", MODEL, 10).await, id_seq(&[&theirs[0]]));
    assert_eq!(search_ids(&s, &t, &u, MODEL, &q, 10).await, vec![mine[1].id]);
    assert!(search_ids(&s, &t2, &u, MODEL, &q, 10).await.is_empty());
    assert_eq!(s.stats(&t).await.unwrap().messages_with_vector, 1);
    assert_eq!(s.stats(&t2).await.unwrap().messages_with_vector, 0);
    // The messages themselves are unchanged.
    assert_eq!(s.get_message(&t, mine[1].id).await.unwrap().as_ref(), Some(&mine[1]));
    assert_eq!(s.get_message(&t2, theirs[0].id).await.unwrap().as_ref(), Some(&theirs[0]));

    // A new vector replaces the old one.
    let q2 = unit(4, 2);
    s.set_message_vectors(&t, MODEL, vec![(mine[0].id, q.clone()), (mine[1].id, q2.clone())])
        .await
        .unwrap();
    assert_eq!(search_ids(&s, &t, &u, MODEL, &q2, 10).await[0], mine[1].id);
    assert_eq!(search_ids(&s, &t, &u, MODEL, &q, 10).await[0], mine[0].id);
    let hits = s
        .vector_search_messages(&t, &TranscriptFilter::user(u.clone()), MODEL, &q2, 1)
        .await
        .unwrap();
    assert!((hits[0].1 - 1.0).abs() < 1e-4, "{hits:?}");
    assert_eq!(s.stats(&t).await.unwrap().messages_with_vector, 2);
}

/// Exact top k by cosine over one user's messages embedded by one model: best first, never
/// another user's or tenant's messages, never vectors of another model or dimension. The
/// similarities of given messages (`message_similarities`) are the same cosines, under the
/// same rules of tenant, model and dimension.
pub async fn message_vectors_search_exact_top_k(s: Arc<dyn Store>) {
    let (t, t2) = (tenant("t"), tenant("t2"));
    let (u, u2) = (user("u"), user("u2"));
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let v = |x: &[f32]| normalize(x.to_vec());
    let q = v(&[1.0, 0.0, 0.0, 0.0]);
    // u's messages in two conversations, with known similarities to q.
    let a = append(
        &s,
        &t,
        &u,
        "c-a",
        &[
            (MessageRole::User, "sim 0.6"),
            (MessageRole::Assistant, "sim -0.6"),
            (MessageRole::User, "sim 1"),
            (MessageRole::Assistant, "no vector"),
        ],
    )
    .await;
    let b = append(
        &s,
        &t,
        &u,
        "c-b",
        &[(MessageRole::User, "sim 0.8"), (MessageRole::User, "sim 0"), (MessageRole::User, "m6")],
    )
    .await;
    s.set_message_vectors(
        &t,
        MODEL,
        vec![
            (a[0].id, v(&[0.6, 0.0, 0.8, 0.0])),
            (a[1].id, v(&[-0.6, 0.0, 0.0, 0.8])),
            (a[2].id, q.clone()),
            (b[0].id, v(&[0.8, 0.6, 0.0, 0.0])),
            (b[1].id, v(&[0.0, 0.0, 0.0, 1.0])),
        ],
    )
    .await
    .unwrap();
    // Closer vectors of another user, another tenant, and (a re-embed in progress) another
    // model of the same and of another dimension.
    let u2m = append(&s, &t, &u2, "c-u2", &[(MessageRole::User, "u2")]).await;
    let t2m = append(&s, &t2, &u, "c-a", &[(MessageRole::User, "t2")]).await;
    let mb = append(&s, &t, &u, "c-b", &[(MessageRole::User, "model b")]).await;
    s.set_message_vectors(&t, MODEL, vec![(u2m[0].id, q.clone())]).await.unwrap();
    s.set_message_vectors(&t2, MODEL, vec![(t2m[0].id, q.clone())]).await.unwrap();
    s.set_message_vectors(&t, "test-model-b", vec![(mb[0].id, q.clone())]).await.unwrap();
    let q6 = v(&[1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    s.set_message_vectors(&t, MODEL_6, vec![(b[2].id, q6.clone())]).await.unwrap();

    let want = [(a[2].id, 1.0), (b[0].id, 0.8), (a[0].id, 0.6), (b[1].id, 0.0), (a[1].id, -0.6)];
    for k in [1, 3, 5, 100] {
        let got = s
            .vector_search_messages(&t, &TranscriptFilter::user(u.clone()), MODEL, &q, k)
            .await
            .unwrap();
        let want = &want[..k.min(want.len())];
        assert_eq!(
            got.iter().map(|h| h.0).collect::<Vec<_>>(),
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            "top {k}: {got:?}"
        );
        for (g, w) in got.iter().zip(want) {
            assert!((g.1 - w.1).abs() < 1e-4, "cosine of {:?}: got {}, want {}", g.0, g.1, w.1);
        }
    }
    assert!(
        s.vector_search_messages(&t, &TranscriptFilter::user(u.clone()), MODEL, &q, 0)
            .await
            .unwrap()
            .is_empty()
    );
    // The other user and tenant find their own message (and only it).
    assert_eq!(search_ids(&s, &t, &u2, MODEL, &q, 10).await, vec![u2m[0].id]);
    assert_eq!(search_ids(&s, &t2, &u, MODEL, &q, 10).await, vec![t2m[0].id]);
    assert!(search_ids(&s, &t2, &u2, MODEL, &q, 10).await.is_empty());
    assert!(search_ids(&s, &tenant("nobody"), &u, MODEL, &q, 10).await.is_empty());
    // Each model sees only its vectors; a query of another dimension compares nothing.
    assert_eq!(search_ids(&s, &t, &u, "test-model-b", &q, 10).await, vec![mb[0].id]);
    let hits = s
        .vector_search_messages(&t, &TranscriptFilter::user(u.clone()), MODEL_6, &q6, 10)
        .await
        .unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![b[2].id]);
    assert!((hits[0].1 - 1.0).abs() < 1e-4, "{hits:?}");
    assert!(search_ids(&s, &t, &u, MODEL, &q6, 10).await.is_empty(), "4-dim vectors, 6-dim query");
    assert!(search_ids(&s, &t, &u, MODEL_6, &q, 10).await.is_empty(), "6-dim vectors, 4-dim query");
    assert!(search_ids(&s, &t, &u, "unknown-model", &q, 10).await.is_empty());

    // Similarities of given messages: the search's cosines, for the tenant's messages with a
    // vector of the model and the query's dimension only.
    let sims = |model: &'static str, q: Vec<f32>, ids: Vec<MessageId>| {
        let (s, t) = (s.clone(), t.clone());
        async move {
            let mut got = s.message_similarities(&t, model, &q, &ids).await.unwrap();
            got.sort_by_key(|g| g.0);
            got
        }
    };
    let all =
        vec![a[0].id, a[1].id, a[2].id, a[3].id, b[0].id, b[2].id, u2m[0].id, t2m[0].id, mb[0].id];
    let got = sims(MODEL, q.clone(), all.clone()).await;
    let mut want: Vec<(MessageId, f32)> = want.iter().filter(|w| w.0 != b[1].id).copied().collect();
    want.push((u2m[0].id, 1.0));
    want.sort_by_key(|w| w.0);
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        want.iter().map(|w| w.0).collect::<Vec<_>>()
    );
    for (g, w) in got.iter().zip(&want) {
        assert!((g.1 - w.1).abs() < 1e-4, "cosine of {:?}: got {}, want {}", g.0, g.1, w.1);
    }
    assert_eq!(sims("test-model-b", q.clone(), all.clone()).await, vec![(mb[0].id, 1.0)]);
    let six = sims(MODEL_6, q6.clone(), all.clone()).await;
    assert_eq!(six.iter().map(|g| g.0).collect::<Vec<_>>(), vec![b[2].id], "{six:?}");
    assert!(sims(MODEL_6, q.clone(), all.clone()).await.is_empty(), "6-dim vectors, 4-dim query");
    assert!(sims(MODEL, q.clone(), vec![]).await.is_empty());
    let theirs = s.message_similarities(&t2, MODEL, &q, &all).await.unwrap();
    assert_eq!(theirs.iter().map(|g| g.0).collect::<Vec<_>>(), vec![t2m[0].id], "per tenant");
}

/// Many random vectors: every k equals a brute-force scan (scores, and ids up to ties).
pub async fn message_vectors_search_equals_brute_force(s: Arc<dyn Store>) {
    let t = tenant("t");
    let (u, u2) = (user("u"), user("u2"));
    let dims = 4;
    s.ensure_embedding_space(MODEL, dims).await.unwrap();
    let mut mine: Vec<(MessageId, Vec<f32>)> = Vec::new();
    let mut rows = Vec::new();
    for c in 0..4u64 {
        let items: Vec<(MessageRole, String)> =
            (0..15).map(|i| (MessageRole::User, format!("message {c}-{i}"))).collect();
        let items: Vec<(MessageRole, &str)> = items.iter().map(|(r, s)| (*r, s.as_str())).collect();
        for (i, m) in append(&s, &t, &u, &format!("c{c}"), &items).await.into_iter().enumerate() {
            // Some exact duplicates, to exercise ties.
            let vec = if i % 7 == 0 { unit(dims, 1) } else { unit(dims, 100 + c * 100 + i as u64) };
            mine.push((m.id, vec.clone()));
            rows.push((m.id, vec));
        }
        let theirs = append(&s, &t, &u2, &format!("x{c}"), &[(MessageRole::User, "other")]).await;
        rows.push((theirs[0].id, unit(dims, c)));
    }
    s.set_message_vectors(&t, MODEL, rows).await.unwrap();
    assert_eq!(s.stats(&t).await.unwrap().messages_with_vector, 64);
    for qi in 0..4u64 {
        let q = unit(dims, qi);
        let mut want: Vec<(MessageId, f32)> =
            mine.iter().map(|(id, v)| (*id, dot(v, &q))).collect();
        want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for k in [1, 7, 60, 1000] {
            let got = s
                .vector_search_messages(&t, &TranscriptFilter::user(u.clone()), MODEL, &q, k)
                .await
                .unwrap();
            let want = &want[..k.min(want.len())];
            assert_eq!(got.len(), want.len(), "size of top {k}");
            assert!(got.windows(2).all(|w| w[0].1 >= w[1].1), "best first: {got:?}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!((g.1 - w.1).abs() < 1e-4, "score at {i}: got {g:?}, want {w:?}");
                if g.0 != w.0 {
                    let tie = want.iter().any(|x| x.0 == g.0 && (x.1 - w.1).abs() < 1e-5);
                    assert!(tie, "id at {i}: got {g:?}, want {w:?}");
                }
            }
        }
    }
}

/// Erasing a user removes their messages' vectors (search, stats, listings); a tenant
/// holding only messages is listed for maintenance until its last user is erased.
pub async fn message_vectors_erased_with_the_user(s: Arc<dyn Store>) {
    let (chat, mem) = (tenant("chat-only"), tenant("mem-only"));
    let (u1, u2) = (user("u1"), user("u2"));
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    assert!(s.list_tenants().await.unwrap().is_empty());
    s.insert_memories(&mem, vec![new_row(memory(&mem, &u1, "a fact"), Some(unit(4, 7)))])
        .await
        .unwrap();
    let m1 =
        append(&s, &chat, &u1, "c1", &[(MessageRole::User, "a"), (MessageRole::User, "b")]).await;
    let m2 =
        append(&s, &chat, &u2, "c2", &[(MessageRole::User, "c"), (MessageRole::User, "d")]).await;
    assert_eq!(s.list_tenants().await.unwrap(), vec![chat.clone(), mem.clone()]);
    let q = unit(4, 1);
    s.set_message_vectors(
        &chat,
        MODEL,
        vec![(m1[0].id, q.clone()), (m1[1].id, unit(4, 2)), (m2[0].id, q.clone())],
    )
    .await
    .unwrap();
    let st = s.stats(&chat).await.unwrap();
    assert_eq!((st.messages, st.messages_with_vector), (4, 3));
    assert_eq!(search_ids(&s, &chat, &u1, MODEL, &q, 10).await, vec![m1[0].id, m1[1].id]);

    s.erase_user(&chat, &u1).await.unwrap();
    let st = s.stats(&chat).await.unwrap();
    assert_eq!((st.messages, st.messages_with_vector), (2, 1));
    assert!(search_ids(&s, &chat, &u1, MODEL, &q, 10).await.is_empty());
    assert_eq!(search_ids(&s, &chat, &u2, MODEL, &q, 10).await, vec![m2[0].id]);
    assert_eq!(needing(&s, &chat, "c1", MODEL, 10).await, vec![]);
    assert_eq!(convs_needing(&s, &chat, MODEL).await, names(&["c2"]));
    // Vectors arriving for the erased messages (an embed job racing the erasure) are skipped.
    s.set_message_vectors(&chat, MODEL, vec![(m1[0].id, q.clone())]).await.unwrap();
    assert_eq!(s.stats(&chat).await.unwrap().messages_with_vector, 1);
    assert!(search_ids(&s, &chat, &u1, MODEL, &q, 10).await.is_empty());

    // The user starts over in a conversation of the same name: no vector is carried over.
    let fresh = append(&s, &chat, &u1, "c1", &[(MessageRole::User, "again")]).await;
    assert_eq!(needing(&s, &chat, "c1", MODEL, 10).await, id_seq(&[&fresh[0]]));
    assert!(search_ids(&s, &chat, &u1, MODEL, &q, 10).await.is_empty());

    s.erase_user(&chat, &u1).await.unwrap();
    s.erase_user(&chat, &u2).await.unwrap();
    let st = s.stats(&chat).await.unwrap();
    assert_eq!((st.messages, st.messages_with_vector), (0, 0));
    assert_eq!(s.list_tenants().await.unwrap(), vec![mem.clone()]);
}

/// A search's time window (`since` included, `until` excluded) narrows both message lists by
/// `created_at`, before the top `k` is taken: an old message outside it is never returned,
/// even when it is the best match.
pub async fn message_search_time_window(s: Arc<dyn Store>) {
    let (t, u) = (tenant("t"), user("u"));
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let day = |d: i64| time::macros::datetime!(2023-05-01 12:00 UTC) + time::Duration::days(d);
    let texts = ["bowling night with friends", "bowling league final", "went bowling again"];
    let mut batch = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let mut m = message(&t, &u, "c", MessageRole::User, text);
        m.created_at = day(i as i64 * 10); // May 1, May 11, May 21
        batch.push(m);
    }
    // Filler of another user, so that "bowling" is not in half of all rows.
    let filler = (0..6)
        .map(|i| message(&t, &user("w"), "f", MessageRole::User, &format!("lorem ipsum {i}")));
    s.append_messages(&t, filler.collect()).await.unwrap();
    let stored = s.append_messages(&t, batch).await.unwrap();
    let vectors: Vec<(MessageId, Vec<f32>)> =
        stored.iter().enumerate().map(|(i, m)| (m.id, unit(4, i as u64 + 1))).collect();
    s.set_message_vectors(&t, MODEL, vectors.clone()).await.unwrap();

    let window = |since: Option<i64>, until: Option<i64>| TranscriptFilter {
        user: u.clone(),
        since: since.map(day),
        until: until.map(day),
        pooled: false,
    };
    let ids = |idx: &[usize]| idx.iter().map(|i| stored[*i].id).collect::<BTreeSet<_>>();
    for (since, until, want) in [
        (None, None, vec![0, 1, 2]),
        (Some(10), None, vec![1, 2]),
        (None, Some(10), vec![0]),
        (Some(10), Some(20), vec![1]),
        (Some(0), Some(0), vec![]),
        (Some(30), None, vec![]),
    ] {
        let f = window(since, until);
        let text: BTreeSet<MessageId> = s
            .text_search_messages(&t, &f, "bowling", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(text, ids(&want), "text, since {since:?} until {until:?}");
        // The query is the first message's own vector: outside the window it is not found.
        let vec: BTreeSet<MessageId> = s
            .vector_search_messages(&t, &f, MODEL, &vectors[0].1, 10)
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.0)
            .collect();
        assert_eq!(vec, ids(&want), "vector, since {since:?} until {until:?}");
    }
    // k applies after the window: the one message of May 11 with k = 1.
    let may = window(Some(10), Some(20));
    let hits = s.vector_search_messages(&t, &may, MODEL, &vectors[0].1, 1).await.unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [stored[1].id]);
    // The window never widens the user.
    let other = TranscriptFilter::user(user("w"));
    assert!(s.text_search_messages(&t, &other, "bowling", 10).await.unwrap().is_empty());
}

/// Two processes on one database: what one writes to the transcript's vectors (new vectors,
/// a re-embed of the same model, a user erased then written again) is what the other's next
/// search finds, even after it has searched (and, on SQLite, cached) the user's vectors.
pub async fn message_vectors_of_one_process_are_seen_by_the_other(
    a: Arc<dyn Store>,
    b: Arc<dyn Store>,
) {
    let (t, u, w) = (tenant("t"), user("u"), user("w"));
    a.ensure_embedding_space(MODEL, 4).await.unwrap();
    let q = unit(4, 1);
    let all = TranscriptFilter::user(u.clone());
    let search = |s: Arc<dyn Store>| {
        let (t, all, q) = (t.clone(), all.clone(), q.clone());
        async move { s.vector_search_messages(&t, &all, MODEL, &q, 10).await.unwrap() }
    };
    // b looks first, so that whatever it keeps has to catch up.
    assert!(search(b.clone()).await.is_empty());
    let ms =
        append(&a, &t, &u, "c", &[(MessageRole::User, "one"), (MessageRole::User, "two")]).await;
    a.set_message_vectors(&t, MODEL, vec![(ms[0].id, unit(4, 2)), (ms[1].id, unit(4, 3))])
        .await
        .unwrap();
    let got = search(b.clone()).await;
    assert_eq!(got.len(), 2, "{got:?}");
    // The same model again (a message filled in, say): b reads the new vector.
    a.set_message_vectors(&t, MODEL, vec![(ms[1].id, q.clone())]).await.unwrap();
    let got = search(b.clone()).await;
    assert_eq!(got[0].0, ms[1].id);
    assert!((got[0].1 - 1.0).abs() < 1e-5, "b sees the new vector: {got:?}");
    assert!((got[1].1 - dot(&unit(4, 2), &q)).abs() < 1e-5);
    // Another user's vectors never show, before or after b caches u's.
    let theirs = append(&a, &t, &w, "cw", &[(MessageRole::User, "theirs")]).await;
    a.set_message_vectors(&t, MODEL, vec![(theirs[0].id, q.clone())]).await.unwrap();
    assert_eq!(search(b.clone()).await.len(), 2);
    // The user is erased by a, then writes again: b finds only the new message, though the
    // row numbers the erased ones had may be given out again.
    a.erase_user(&t, &u).await.unwrap();
    assert!(search(b.clone()).await.is_empty(), "b still finds erased messages");
    let again = append(&a, &t, &u, "c2", &[(MessageRole::User, "again")]).await;
    a.set_message_vectors(&t, MODEL, vec![(again[0].id, unit(4, 2))]).await.unwrap();
    let got = search(b.clone()).await;
    assert_eq!(got.iter().map(|h| h.0).collect::<Vec<_>>(), vec![again[0].id]);
    // And the same when the erasure is b's own.
    b.erase_user(&t, &u).await.unwrap();
    assert!(search(b.clone()).await.is_empty());
    assert!(search(a.clone()).await.is_empty());
    let w_hits = b
        .vector_search_messages(&t, &TranscriptFilter::user(w.clone()), MODEL, &q, 10)
        .await
        .unwrap();
    assert_eq!(w_hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![theirs[0].id]);
}
