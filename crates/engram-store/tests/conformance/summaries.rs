//! The summary DAG: summaries written once under their claim, read back whole, by level and
//! through their sources; searched by keyword and vector within a time window; embedded
//! again by a re-embed; erased with their user and counted in the stats.

use std::sync::Arc;

use engram_core::model::{
    ConversationId, Message, MessageRole, Summary, SummaryId, SummaryKind, TenantId, UserId,
};
use engram_core::store::prelude::*;
use engram_core::store::{NewSummary, SummaryClaim, TranscriptFilter};
use time::OffsetDateTime;
use time::macros::datetime;

use crate::harness::{MODEL, message, now, tenant, unit, user};

fn day(d: i64) -> OffsetDateTime {
    datetime!(2023-05-01 12:00 UTC) + time::Duration::days(d)
}

/// `n` messages of `u` in conversation `c`, one a day from `from`.
pub(crate) async fn messages(
    s: &Arc<dyn Store>,
    t: &TenantId,
    u: &UserId,
    c: &str,
    from: i64,
    n: i64,
) -> Vec<Message> {
    let batch = (0..n)
        .map(|i| {
            let mut m = message(t, u, c, MessageRole::User, &format!("message {}", from + i));
            m.created_at = day(from + i);
            m
        })
        .collect();
    s.append_messages(t, batch).await.unwrap()
}

pub(crate) fn summary(
    t: &TenantId,
    u: &UserId,
    c: &str,
    depth: i64,
    text: &str,
    span: (i64, i64),
    n: i64,
) -> Summary {
    Summary {
        id: SummaryId::new(),
        tenant_id: t.clone(),
        user_id: u.clone(),
        conversation_id: ConversationId::parse(c).unwrap(),
        parent_id: None,
        depth,
        kind: SummaryKind::at_depth(depth),
        content: text.to_string(),
        message_count: n,
        earliest_at: day(span.0),
        latest_at: day(span.1),
        model: Some("scripted-main".into()),
        created_at: now(),
        access_count: 0,
        last_accessed_at: None,
    }
}

pub(crate) fn new(
    s: Summary,
    sources: Vec<uuid::Uuid>,
    vector: u64,
    claim: SummaryClaim,
) -> NewSummary {
    NewSummary { summary: s, sources, embedding: Some((MODEL.to_string(), unit(4, vector))), claim }
}

pub async fn summaries_are_written_once_under_their_claim(s: Arc<dyn Store>) {
    let (t, u) = (tenant("t"), user("u"));
    let c = ConversationId::parse("c").unwrap();
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let ms = messages(&s, &t, &u, "c", 0, 6).await;
    let ids = |r: std::ops::Range<usize>| ms[r].iter().map(|m| m.id.0).collect::<Vec<_>>();

    // A leaf over messages 1..=3: written once; the same claim again writes nothing.
    let leaf1 = summary(&t, &u, "c", 0, "first leaf about gardening", (0, 2), 3);
    let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 3 };
    assert!(s.insert_summary(&t, new(leaf1.clone(), ids(0..3), 1, claim)).await.unwrap());
    let again = summary(&t, &u, "c", 0, "duplicate leaf", (0, 2), 3);
    assert!(!s.insert_summary(&t, new(again.clone(), ids(0..3), 1, claim)).await.unwrap());
    assert_eq!(s.get_summary(&t, again.id).await.unwrap(), None, "a lost claim writes nothing");
    assert!(s.summary_sources(&t, again.id).await.unwrap().is_empty());
    assert_eq!(s.get_conversation(&t, &c).await.unwrap().unwrap().summarized_seq, 3);
    // Read back whole, its sources in order; invisible from another tenant.
    assert_eq!(s.get_summary(&t, leaf1.id).await.unwrap(), Some(leaf1.clone()));
    assert_eq!(s.summary_sources(&t, leaf1.id).await.unwrap(), ids(0..3));
    assert_eq!(s.get_summary(&tenant("other"), leaf1.id).await.unwrap(), None);
    assert_eq!(s.get_summaries(&tenant("other"), &[leaf1.id]).await.unwrap(), vec![]);

    let leaf2 = summary(&t, &u, "c", 0, "second leaf about cycling", (3, 5), 3);
    let claim = SummaryClaim::Messages { after_seq: 3, through_seq: 6 };
    assert!(s.insert_summary(&t, new(leaf2.clone(), ids(3..6), 2, claim)).await.unwrap());
    let open = s.conversation_summaries(&t, &c, Some(0), true).await.unwrap();
    assert_eq!(open.iter().map(|x| x.id).collect::<Vec<_>>(), vec![leaf1.id, leaf2.id]);

    // A branch over both leaves takes them; a second branch over them writes nothing.
    let branch = summary(&t, &u, "c", 1, "branch: gardening then cycling", (0, 5), 6);
    let children = vec![leaf1.id.0, leaf2.id.0];
    assert!(
        s.insert_summary(&t, new(branch.clone(), children.clone(), 3, SummaryClaim::Children))
            .await
            .unwrap()
    );
    let rival = summary(&t, &u, "c", 1, "rival branch", (0, 5), 6);
    assert!(
        !s.insert_summary(&t, new(rival.clone(), children.clone(), 3, SummaryClaim::Children))
            .await
            .unwrap()
    );
    assert_eq!(s.get_summary(&t, rival.id).await.unwrap(), None);
    assert_eq!(s.conversation_summaries(&t, &c, Some(0), true).await.unwrap(), vec![]);
    let all = s.conversation_summaries(&t, &c, None, false).await.unwrap();
    assert_eq!(all.len(), 3);
    for leaf in all.iter().filter(|x| x.depth == 0) {
        assert_eq!(leaf.parent_id, Some(branch.id));
    }
    assert_eq!(s.summary_sources(&t, branch.id).await.unwrap(), children);
    let mut got = s.get_summaries(&t, &[branch.id, leaf2.id, SummaryId::new()]).await.unwrap();
    got.sort_by_key(|x| x.depth);
    assert_eq!(got.iter().map(|x| x.id).collect::<Vec<_>>(), vec![leaf2.id, branch.id]);

    // Children of another conversation, or already taken, are never claimed.
    messages(&s, &t, &u, "d", 10, 2).await;
    let d = summary(&t, &u, "d", 0, "leaf of d", (10, 11), 2);
    let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 2 };
    assert!(s.insert_summary(&t, new(d.clone(), vec![], 4, claim)).await.unwrap());
    let mixed = summary(&t, &u, "c", 1, "mixed", (0, 11), 8);
    let claim = SummaryClaim::Children;
    assert!(!s.insert_summary(&t, new(mixed, vec![d.id.0, leaf1.id.0], 4, claim)).await.unwrap());
    assert_eq!(s.get_summary(&t, d.id).await.unwrap().unwrap().parent_id, None);

    let st = s.stats(&t).await.unwrap();
    assert_eq!((st.summaries, st.summaries_with_vector, st.summary_depth), (4, 4, 2));
    assert_eq!(st.messages_unsummarized, 0);

    // Access reinforcement: a search's return is counted on messages and summaries, once
    // per call, in the caller's tenant only.
    let at = day(30);
    s.touch_transcript(&t, &[ms[0].id, ms[0].id], &[leaf2.id], at).await.unwrap();
    s.touch_transcript(&tenant("other"), &[ms[0].id], &[leaf2.id], day(40)).await.unwrap();
    s.touch_transcript(&t, &[], &[leaf2.id, SummaryId::new()], at).await.unwrap();
    let m = s.get_message(&t, ms[0].id).await.unwrap().unwrap();
    assert_eq!((m.access_count, m.last_accessed_at), (1, Some(at)));
    let x = s.get_summary(&t, leaf2.id).await.unwrap().unwrap();
    assert_eq!((x.access_count, x.last_accessed_at), (2, Some(at)));
    assert_eq!(s.get_message(&t, ms[1].id).await.unwrap().unwrap().access_count, 0);
}

pub async fn summaries_are_searched_reembedded_and_erased(s: Arc<dyn Store>) {
    let (t, u, w) = (tenant("t"), user("u"), user("w"));
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let texts = [
        ("a", "we planned the bowling league final", (0, 2)),
        ("b", "garden tomatoes and basil", (10, 12)),
        ("c", "bowling again after the wedding", (20, 22)),
    ];
    let mut written = Vec::new();
    for (i, (c, text, span)) in texts.iter().enumerate() {
        messages(&s, &t, &u, c, span.0, 3).await;
        let x = summary(&t, &u, c, 0, text, *span, 3);
        let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 3 };
        assert!(s.insert_summary(&t, new(x.clone(), vec![], i as u64 + 1, claim)).await.unwrap());
        written.push(x);
    }
    // Another user's summary with the same words is never found for `u`.
    messages(&s, &t, &w, "w", 0, 3).await;
    let theirs = summary(&t, &w, "w", 0, "bowling bowling bowling", (0, 2), 3);
    let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 3 };
    assert!(s.insert_summary(&t, new(theirs, vec![], 1, claim)).await.unwrap());
    // Filler, so that "bowling" is not in half of the indexed rows (SQLite counts the whole
    // index).
    for i in 0..6 {
        let c = format!("filler-{i}");
        messages(&s, &t, &w, &c, 0, 1).await;
        let x = summary(&t, &w, &c, 0, &format!("lorem ipsum {i}"), (0, 0), 1);
        let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 1 };
        assert!(s.insert_summary(&t, new(x, vec![], 4, claim)).await.unwrap());
    }

    let window = |since: Option<i64>, until: Option<i64>| TranscriptFilter {
        user: u.clone(),
        since: since.map(day),
        until: until.map(day),
        pooled: false,
    };
    let found = |hits: Vec<(SummaryId, f64)>| {
        let mut v: Vec<usize> =
            hits.iter().map(|h| written.iter().position(|x| x.id == h.0).unwrap()).collect();
        v.sort();
        v
    };
    // A summary is in a window when its span overlaps it.
    for (since, until, want) in [
        (None, None, vec![0, 2]),
        (Some(1), None, vec![0, 2]),
        (Some(3), None, vec![2]),
        (None, Some(1), vec![0]),
        (Some(5), Some(20), vec![]),
        (Some(5), Some(21), vec![2]),
    ] {
        let hits = s.text_search_summaries(&t, &window(since, until), "bowling", 10).await.unwrap();
        assert_eq!(found(hits.clone()), want, "{since:?}..{until:?}");
        assert!(hits.iter().all(|h| h.1 > 0.0 && h.1 <= 1.0), "coverage in 0..=1: {hits:?}");
    }
    // By time alone: the user's summaries overlapping the window, the finest first.
    let in_window = async |since, until| {
        let rows = s.summaries_in(&t, &window(since, until), 10).await.unwrap();
        rows.iter().map(|x| written.iter().position(|w| w.id == x.id).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(in_window(None, None).await, vec![0, 1, 2]);
    assert_eq!(in_window(Some(11), Some(21)).await, vec![1, 2]);
    assert_eq!(in_window(Some(13), Some(20)).await, Vec::<usize>::new());
    // Vectors: the exact nearest first, only the user's, only in the window.
    let hits =
        s.vector_search_summaries(&t, &window(None, None), MODEL, &unit(4, 2), 3).await.unwrap();
    assert_eq!(hits[0].0, written[1].id);
    assert!((hits[0].1 - 1.0).abs() < 1e-4, "{hits:?}");
    assert_eq!(hits.len(), 3);
    let hits = s
        .vector_search_summaries(&t, &window(Some(15), None), MODEL, &unit(4, 2), 3)
        .await
        .unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![written[2].id]);
    assert_eq!(
        s.vector_search_summaries(&t, &window(None, None), "other-model", &unit(4, 2), 3)
            .await
            .unwrap(),
        vec![]
    );

    // A re-embed finds every summary without a vector of the new model and fills it.
    let needing = s.summaries_needing_vectors(&t, "model-b", 100).await.unwrap();
    assert_eq!(needing.len(), 10);
    assert!(
        needing
            .iter()
            .any(|(id, text)| *id == written[1].id && text == "garden tomatoes and basil")
    );
    let filled = needing.iter().map(|(id, _)| (*id, unit(4, 3))).collect();
    s.set_summary_vectors(&t, "model-b", filled).await.unwrap();
    assert_eq!(s.summaries_needing_vectors(&t, "model-b", 10).await.unwrap(), vec![]);
    assert_eq!(s.summaries_needing_vectors(&tenant("other"), "model-b", 10).await.unwrap(), vec![]);

    // Erasure removes the user's summaries and their source links, nobody else's.
    let counts = s.erase_user(&t, &u).await.unwrap();
    assert_eq!(counts.summaries, 3);
    for x in &written {
        assert_eq!(s.get_summary(&t, x.id).await.unwrap(), None);
    }
    assert_eq!(
        s.text_search_summaries(&t, &window(None, None), "bowling", 10).await.unwrap(),
        vec![]
    );
    let theirs = TranscriptFilter::user(w.clone());
    assert_eq!(s.text_search_summaries(&t, &theirs, "bowling", 10).await.unwrap().len(), 1);
    assert_eq!(s.stats(&t).await.unwrap().summaries, 7);
}
