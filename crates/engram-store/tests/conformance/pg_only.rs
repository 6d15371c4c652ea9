//! What only the PostgreSQL store has: HNSW indexes for very large scopes, per-user keyword
//! postings, migrations shared by several processes.

use std::sync::Arc;

use engram_core::error::Error;
use engram_core::model::{Category, MemoryId};
use engram_core::store::MemoryFilter;
use engram_core::store::prelude::*;
use sqlx::Row;

use crate::harness::{
    Backend, Fixture, MODEL, dot, memory, message, new_row, normalize, tenant, unit, user,
};

/// A clustered data set (like real embeddings) in one scope over the exact limit: no HNSW
/// index exists until a search finds the scope over the limit; that search is answered
/// exactly and starts building the scope's own partial index in the background; later
/// searches go through it, close to the exact answer (recall@10 ≥ 0.9) and never short
/// under a filter. Other scopes stay exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hnsw_index_built_lazily_for_scopes_over_the_exact_limit() {
    let f = Fixture::new(Backend::Postgres).await;
    let pg = f.pg();
    let s: Arc<dyn Store> = pg.clone();
    let t = tenant("t");
    let u = user("u");
    let small = user("small");
    let dims = 32;
    s.ensure_embedding_space(MODEL, dims).await.unwrap();
    let centres: Vec<Vec<f32>> = (0..40).map(|c| unit(dims, 5000 + c)).collect();
    let mut rows = Vec::new();
    let mut vectors = Vec::new();
    for i in 0..3000u64 {
        let c = &centres[(i % 40) as usize];
        let noise = unit(dims, 90_000 + i);
        let v = normalize(c.iter().zip(&noise).map(|(a, b)| a + 0.6 * b).collect());
        let mut m = memory(&t, &u, &format!("row {i}"));
        m.category = Category::ALL[(i % 6) as usize];
        vectors.push((m.id, m.category, v.clone()));
        rows.push(new_row(m, Some(v)));
    }
    for chunk in rows.chunks(500) {
        s.insert_memories(&t, chunk.to_vec()).await.unwrap();
    }
    let small_rows: Vec<_> = (0..50u64)
        .map(|i| new_row(memory(&t, &small, &format!("small {i}")), Some(unit(dims, 300 + i))))
        .collect();
    s.insert_memories(&t, small_rows).await.unwrap();
    sqlx::query("ANALYZE memories").execute(pg.pool()).await.unwrap();
    let indexes = || async {
        sqlx::query_as::<_, (String, bool)>(
            "SELECT c.relname::text, i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid \
             WHERE c.relname LIKE 'memories\\_hnsw\\_%' ORDER BY 1",
        )
        .fetch_all(pg.pool())
        .await
        .unwrap()
    };
    assert!(indexes().await.is_empty(), "writes maintain no HNSW index before a scope needs one");

    let exact_top = |q: &[f32], cat: Option<Category>| {
        let mut exact: Vec<(MemoryId, f32)> = vectors
            .iter()
            .filter(|(_, c, _)| cat.is_none_or(|x| x == *c))
            .map(|(id, _, v)| (*id, dot(v, q)))
            .collect();
        exact.sort_by(|a, b| b.1.total_cmp(&a.1));
        exact.truncate(10);
        exact
    };
    let query = |qi: u64| {
        normalize(
            centres[(qi * 7 % 40) as usize]
                .iter()
                .zip(unit(dims, 7_000 + qi))
                .map(|(a, b)| a + 0.6 * b)
                .collect(),
        )
    };
    pg.set_exact_scan_limit(2000);
    let all = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let facts = MemoryFilter { categories: Some(vec![Category::Fact]), ..all.clone() };
    // The first search over the limit ranks the whole scope (exact) and starts the build.
    let q = query(0);
    let got = s.vector_search(&t, &all, &q, 10).await.unwrap();
    let ids: Vec<MemoryId> = got.iter().map(|g| g.0).collect();
    assert_eq!(ids, exact_top(&q, None).iter().map(|e| e.0).collect::<Vec<_>>());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let built = loop {
        let ix = indexes().await;
        if ix.len() == 1 && ix[0].1 {
            break ix[0].0.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no index built in the background: {ix:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(built.starts_with(&format!("memories_hnsw_{dims}_")), "{built}");
    // An explicit build finds it there.
    assert!(pg.build_scope_index(&t, &u).await.unwrap());
    assert_eq!(indexes().await.len(), 1);

    let mut found = 0usize;
    let mut total = 0usize;
    for qi in 0..20u64 {
        let q = query(qi);
        for (filter, cat) in [(&all, None), (&facts, Some(Category::Fact))] {
            let got = s.vector_search(&t, filter, &q, 10).await.unwrap();
            let exact = exact_top(&q, cat);
            assert_eq!(got.len(), 10, "the iterative scan fills the page under a filter");
            assert!(got.windows(2).all(|w| w[0].1 >= w[1].1));
            found += got.iter().filter(|g| exact.iter().any(|e| e.0 == g.0)).count();
            total += 10;
        }
    }
    let recall = found as f64 / total as f64;
    assert!(recall >= 0.9, "recall@10 through HNSW: {recall}");

    // The scope's searches really use its index; another user's rows are not in it.
    let mut tx = pg.pool().begin().await.unwrap();
    sqlx::query("SET LOCAL hnsw.iterative_scan = strict_order").execute(&mut *tx).await.unwrap();
    let plan = |user: &'static str| {
        format!(
            "EXPLAIN SELECT id FROM memories WHERE tenant_id = 't' AND user_id = '{user}' AND superseded_at IS NULL \
             AND vector_dims(embedding) = {dims} ORDER BY (embedding::vector({dims})) <#> (SELECT embedding FROM memories LIMIT 1)::vector({dims}) LIMIT 10"
        )
    };
    let lines = |rows: Vec<sqlx::postgres::PgRow>| -> Vec<String> {
        rows.iter().map(|r| r.get::<String, _>(0)).collect()
    };
    let p = lines(sqlx::query(sqlx::AssertSqlSafe(plan("u"))).fetch_all(&mut *tx).await.unwrap());
    assert!(p.iter().any(|l| l.contains(&built)), "{p:#?}");
    let p =
        lines(sqlx::query(sqlx::AssertSqlSafe(plan("small"))).fetch_all(&mut *tx).await.unwrap());
    assert!(!p.iter().any(|l| l.contains("hnsw")), "{p:#?}");
    tx.rollback().await.unwrap();
    let small_filter = MemoryFilter { user_id: Some(small.clone()), ..Default::default() };
    assert_eq!(s.vector_search(&t, &small_filter, &q, 100).await.unwrap().len(), 50);
    assert_eq!(indexes().await.len(), 1, "a scope within the limit gets no index");

    // An interrupted build leaves an invalid index: the next build replaces it.
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{built}'::regclass"
    )))
    .execute(pg.pool())
    .await
    .unwrap();
    let got = s.vector_search(&t, &all, &q, 10).await.unwrap();
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        exact_top(&q, None).iter().map(|e| e.0).collect::<Vec<_>>(),
        "exact while the index is invalid"
    );
    assert!(pg.build_scope_index(&t, &u).await.unwrap());
    assert_eq!(indexes().await, vec![(built, true)]);
    f.finish().await;
}

/// Several processes starting at once migrate once; a newer schema is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_under_concurrency_and_newer_schema_refused() {
    let f = Fixture::new(Backend::Postgres).await;
    let url = f.pg_url();
    // A second, empty database for the race.
    let race_db =
        format!("{}_race", url.rsplit('/').next().unwrap_or("x").split('?').next().unwrap_or("x"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {race_db}")))
        .execute(f.pg().pool())
        .await
        .unwrap();
    let race_url = {
        let (base, _) = url.rsplit_once('/').unwrap();
        format!("{base}/{race_db}")
    };
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let u = race_url.clone();
        tasks.push(tokio::spawn(async move { engram_store::open_postgres(&u).await.map(|_| ()) }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let race = engram_store::open_postgres(&race_url).await.unwrap();
    let n: i64 = sqlx::query("SELECT count(*) FROM schema_migrations")
        .fetch_one(race.pool())
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, engram_store::migrate::POSTGRES.len() as i64);
    sqlx::query(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', now())",
    )
    .execute(race.pool())
    .await
    .unwrap();
    race.pool().close().await;
    match engram_store::open_postgres(&race_url).await {
        Err(Error::Unprocessable(m)) => assert!(m.contains("upgrade engram"), "{m}"),
        Err(e) => panic!("unexpected error: {e:?}"),
        Ok(_) => panic!("a newer schema was accepted"),
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE {race_db} WITH (FORCE)")))
        .execute(f.pg().pool())
        .await
        .unwrap();
    // Bad URLs and unreachable servers are clear errors, not panics.
    assert!(matches!(engram_store::open_postgres("not a url").await, Err(Error::Unprocessable(_))));
    assert!(matches!(
        engram_store::open_postgres("postgres://nobody@127.0.0.1:1/none").await,
        Err(Error::Unprocessable(_))
    ));
    f.finish().await;
}

/// Text PostgreSQL cannot store is an input error, not an internal one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_characters_are_invalid_input() {
    let f = Fixture::new(Backend::Postgres).await;
    let s = f.store.clone();
    let t = tenant("t");
    let u = user("u");
    let r = s.insert_memories(&t, vec![new_row(memory(&t, &u, "a\u{0}b"), None)]).await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    let mut m = memory(&t, &u, "fine");
    m.metadata = serde_json::json!({"k": "a\u{0}b"});
    let r = s.insert_memories(&t, vec![new_row(m, None)]).await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    f.finish().await;
}

/// Keyword search reads the user's statistics from `fts_len` (migration 3) and its postings
/// from the per-user lexemes of migration 4: rows written before migration 3 (`fts_len`
/// NULL), migration 4 applied over existing rows, and a database without `btree_gin` (the
/// table-wide GIN index) rank the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyword_search_same_without_fts_len_or_btree_gin() {
    let f = Fixture::new(Backend::Postgres).await;
    let pg = f.pg();
    let s: Arc<dyn Store> = pg.clone();
    let t = tenant("t");
    let u = user("u");
    let other = user("other");
    let texts = [
        "Maya moved to Lisbon with her sister",
        "the sister of Maya plays the cello",
        "Maya likes green tea, green apples and green walls",
        "a cat sleeps on the sofa",
        "her sister's cat is called Miso",
        "Lisbon has trams and hills",
        "tea with Maya's sister at noon",
    ];
    // One row alone (the single-row insert), then the rest in a batch.
    s.insert_memories(&t, vec![new_row(memory(&t, &u, texts[0]), None)]).await.unwrap();
    let rows: Vec<_> = texts[1..].iter().map(|x| new_row(memory(&t, &u, x), None)).collect();
    s.insert_memories(&t, rows).await.unwrap();
    let noise: Vec<_> =
        (0..20).map(|i| new_row(memory(&t, &other, &format!("maya sister {i}")), None)).collect();
    s.insert_memories(&t, noise).await.unwrap();
    let wrong: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memories WHERE fts_len IS DISTINCT FROM length(fts)",
    )
    .fetch_one(pg.pool())
    .await
    .unwrap();
    assert_eq!(wrong, 0);

    // The statistics the triggers keep equal those counted from the rows, after single and
    // batch inserts, a purge and an erasure.
    let stats_wrong = || async {
        sqlx::query_scalar::<_, i64>(
            "WITH truth AS (SELECT tenant_id, user_id, ''::text COLLATE \"C\" AS lexeme, count(*) AS rows, \
             coalesce(sum(length(fts)), 0) AS len FROM memories GROUP BY 1, 2 \
             UNION ALL SELECT m.tenant_id, m.user_id, l, count(*), 0 FROM memories m, \
             unnest(tsvector_to_array(m.fts)) l GROUP BY 1, 2, 3) \
             SELECT (SELECT count(*) FROM (SELECT * FROM truth EXCEPT SELECT * FROM memory_fts_stats) a) \
             + (SELECT count(*) FROM (SELECT * FROM memory_fts_stats EXCEPT SELECT * FROM truth) b)",
        )
        .fetch_one(pg.pool())
        .await
        .unwrap()
    };
    assert_eq!(stats_wrong().await, 0);
    let gone = memory(&t, &other, "maya sister gone");
    s.insert_memories(&t, vec![new_row(gone.clone(), None)]).await.unwrap();
    s.purge_memory(&t, gone.id).await.unwrap();
    let erased = user("erased");
    s.insert_memories(&t, vec![new_row(memory(&t, &erased, "maya sister"), None)]).await.unwrap();
    assert_eq!(stats_wrong().await, 0);
    s.erase_user(&t, &erased).await.unwrap();
    assert_eq!(stats_wrong().await, 0);
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory_fts_stats WHERE user_id IN ('erased')")
            .fetch_one(pg.pool())
            .await
            .unwrap();
    assert_eq!(left, 0, "an erased user leaves no statistics");

    let filter = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let queries = ["maya sister", "green tea", "sister cat lisbon", "the", "sist", "tram hills"];
    let mut before = Vec::new();
    for q in queries {
        before.push(s.text_search(&t, &filter, q, 5).await.unwrap());
    }
    assert!(before.iter().any(|h| !h.is_empty()));
    let same = |label: &str, after: Vec<Vec<(MemoryId, f64)>>| {
        for ((q, b), a) in queries.iter().zip(&before).zip(&after) {
            assert_eq!(b.len(), a.len(), "{label}: {q}");
            for (x, y) in b.iter().zip(a) {
                assert_eq!(x.0, y.0, "{label}: {q}");
                assert!((x.1 - y.1).abs() < 1e-12, "{label}: {q}: {} vs {}", x.1, y.1);
            }
        }
    };

    // Rows written before migration 3.
    sqlx::query("UPDATE memories SET fts_len = NULL WHERE content LIKE '%sister%'")
        .execute(pg.pool())
        .await
        .unwrap();
    let mut after = Vec::new();
    for q in queries {
        after.push(s.text_search(&t, &filter, q, 5).await.unwrap());
    }
    same("fts_len NULL", after);

    // The search's expression is the one the per-user postings index (migration 4). (On a
    // table this small the planner would rather read the user's rows: other scans are
    // disabled for the question.)
    let mut tx = pg.pool().begin().await.unwrap();
    sqlx::raw_sql("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off")
        .execute(&mut *tx)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT id FROM memories WHERE engram_scoped_fts(tenant_id, user_id, fts) @@ ('''' || engram_fts_key('t', 'u') || '_sist'':*')::tsquery",
    )
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert!(plan.iter().any(|l| l.contains("memories_fts_scoped")), "{plan:#?}");
    let other_key: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT left(x, 9) FROM memories, unnest(tsvector_to_array(engram_scoped_fts(tenant_id, user_id, fts))) x \
         WHERE user_id = 'other'",
    )
    .fetch_all(pg.pool())
    .await
    .unwrap();
    assert_eq!(other_key.len(), 1, "one key per user: {other_key:?}");

    // Migration 4 applied to a store that already holds rows (the index is built over them);
    // what migrations 6 to 20 add is undone too, since every later migration runs again.
    sqlx::raw_sql(
        "DROP FUNCTION engram_vector_xid CASCADE; ALTER TABLE messages DROP COLUMN vector_xid; \
         ALTER TABLE summaries DROP COLUMN vector_xid; \
         DROP TABLE transcript_fts_stats; DROP FUNCTION engram_transcript_stats_insert, \
         engram_message_stats_delete, engram_summary_stats_delete, engram_message_stats_update, \
         engram_summary_stats_update CASCADE; \
         DROP TRIGGER messages_context ON messages; DROP TRIGGER messages_context_next ON messages; \
         DROP INDEX messages_ctx_fts_scoped; ALTER TABLE messages DROP COLUMN ctx_fts; \
         DROP FUNCTION engram_message_context_new, engram_message_context_next, \
         engram_message_context; \
         DROP INDEX memories_fts_scoped, messages_fts_scoped; \
         DROP INDEX summaries_fts_scoped, summaries_conversation, summaries_parent; \
         ALTER TABLE summaries DROP COLUMN fts, DROP COLUMN fts_text; \
         ALTER TABLE conversations DROP COLUMN summarized_seq; \
         ALTER TABLE messages DROP COLUMN access_count, DROP COLUMN last_accessed_at; \
         ALTER TABLE summaries DROP COLUMN access_count, DROP COLUMN last_accessed_at; \
         DROP FUNCTION engram_scoped_fts, engram_scoped_fts_long, engram_fts_key; \
         DROP TABLE memory_fts_stats; \
         DROP FUNCTION engram_fts_stats_insert, engram_fts_stats_delete, \
         engram_memory_stats_update CASCADE; \
         DROP TABLE session_state, speakers, ui_sessions; \
         CREATE INDEX messages_fts_user ON messages USING gin (tenant_id, user_id, fts); \
         DROP INDEX messages_unembedded, jobs_tenant_status, jobs_done, jobs_done_kind; \
         DELETE FROM schema_migrations WHERE version >= 4",
    )
    .execute(pg.pool())
    .await
    .unwrap();
    let again = engram_store::open_postgres(&f.pg_url()).await.unwrap();
    let mut after = Vec::new();
    for q in queries {
        after.push(again.text_search(&t, &filter, q, 5).await.unwrap());
    }
    same("migration 4 over existing rows", after);
    again.pool().close().await;

    // No btree_gin: the table-wide index of migration 1.
    sqlx::raw_sql(
        "DROP INDEX memories_fts_user; CREATE INDEX memories_fts ON memories USING gin (fts)",
    )
    .execute(pg.pool())
    .await
    .unwrap();
    let mut after = Vec::new();
    for q in queries {
        after.push(s.text_search(&t, &filter, q, 5).await.unwrap());
    }
    same("table-wide GIN", after);
    f.finish().await;
}

/// The BM25 statistics of a user's transcript that the triggers of migration 11 keep (row
/// count and total length, per user and table) equal those counted from the rows: after a
/// single append and batches whose contexts chain, another user's messages, summaries, an
/// operator's rewrite of a message (which rewrites the contexts after it) and an erasure.
/// A keyword search reads them, so it ranks as when it counted the rows itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcript_statistics_kept_by_triggers_equal_the_rows() {
    use crate::summaries::{messages, new, summary};
    use engram_core::model::MessageRole;
    use engram_core::store::{SummaryClaim, TranscriptFilter};

    let f = Fixture::new(Backend::Postgres).await;
    let pg = f.pg();
    let s: Arc<dyn Store> = pg.clone();
    let (t, u, other) = (tenant("t"), user("u"), user("other"));
    s.ensure_embedding_space(MODEL, 4).await.unwrap();
    let wrong = || async {
        sqlx::query_scalar::<_, i64>(
            "WITH truth AS (SELECT tenant_id, user_id, 'messages' AS source, count(*) AS rows, \
             sum(length(fts) + length(ctx_fts)) AS len FROM messages GROUP BY 1, 2 \
             UNION ALL SELECT tenant_id, user_id, 'summaries', count(*), sum(length(fts)) \
             FROM summaries GROUP BY 1, 2) \
             SELECT (SELECT count(*) FROM (SELECT * FROM truth EXCEPT SELECT * FROM transcript_fts_stats) a) \
             + (SELECT count(*) FROM (SELECT * FROM transcript_fts_stats EXCEPT SELECT * FROM truth) b)",
        )
        .fetch_one(pg.pool())
        .await
        .unwrap()
    };
    let said = [
        "I planted tomatoes and basil in the garden",
        "yes, the garden gets sun all afternoon",
        "my sister visits in May with her dog",
        "we will hike the ridge trail together",
        "the dog loves the ridge trail",
        "tomatoes need water every evening",
    ];
    s.append_messages(&t, vec![message(&t, &u, "c1", MessageRole::User, said[0])]).await.unwrap();
    assert_eq!(wrong().await, 0, "a single append");
    let batch: Vec<_> =
        said[1..].iter().map(|x| message(&t, &u, "c1", MessageRole::User, x)).collect();
    s.append_messages(&t, batch).await.unwrap();
    messages(&s, &t, &u, "c2", 0, 8).await;
    messages(&s, &t, &other, "c3", 0, 5).await;
    assert_eq!(wrong().await, 0, "batches whose contexts chain, two users");
    let n: i64 = sqlx::query_scalar(
        "SELECT rows FROM transcript_fts_stats WHERE user_id = 'u' AND source = 'messages'",
    )
    .fetch_one(pg.pool())
    .await
    .unwrap();
    assert_eq!(n, 14);

    let c2: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM messages WHERE conversation_id = 'c2' ORDER BY seq LIMIT 3",
    )
    .fetch_all(pg.pool())
    .await
    .unwrap();
    let leaf = summary(&t, &u, "c2", 0, "messages about the garden and the ridge trail", (0, 2), 3);
    let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 3 };
    assert!(s.insert_summary(&t, new(leaf, c2, 1, claim)).await.unwrap());
    assert_eq!(wrong().await, 0, "a summary");

    // An operator rewrites the first message: the contexts of the two after it change too.
    let changed = sqlx::query(
        "UPDATE messages SET fts_text = 'we talked about sailing boats and harbours' \
         WHERE conversation_id = 'c1' AND seq = 1",
    )
    .execute(pg.pool())
    .await
    .unwrap();
    assert_eq!(changed.rows_affected(), 1);
    let contexts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages \
         WHERE conversation_id = 'c1' AND ctx_fts @@ plainto_tsquery('simple', 'sailing')",
    )
    .fetch_one(pg.pool())
    .await
    .unwrap();
    assert_eq!(contexts, 2, "the next two messages read the rewritten one as context");
    assert_eq!(wrong().await, 0, "a rewrite and the contexts after it");

    // The search reads them: the message holding both words ranks first.
    let window = TranscriptFilter::user(u.clone());
    let hits = s.text_search_messages(&t, &window, "tomatoes water", 3).await.unwrap();
    assert!(!hits.is_empty());
    let top: String = sqlx::query_scalar("SELECT content FROM messages WHERE id = $1")
        .bind(hits[0].0.0)
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert_eq!(top, said[5], "{hits:?}");
    let leaves = s.text_search_summaries(&t, &window, "ridge trail", 3).await.unwrap();
    assert_eq!(leaves.len(), 1);

    s.erase_user(&t, &other).await.unwrap();
    assert_eq!(wrong().await, 0, "an erasure");
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM transcript_fts_stats WHERE user_id = 'other'")
            .fetch_one(pg.pool())
            .await
            .unwrap();
    assert_eq!(left, 0, "an erased user leaves no statistics");
    s.erase_user(&t, &u).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM transcript_fts_stats")
        .fetch_one(pg.pool())
        .await
        .unwrap();
    assert_eq!(left, 0, "nor does the last user");
    f.finish().await;
}

/// The message vectors a process keeps in memory (migration 12) catch up with writers that
/// commit out of the order they began in: a transaction that wrote a vector before another
/// and commits after it, while a search read the user in between, is seen by the next
/// search. A vector cleared or rewritten under another model leaves the cache; a window and
/// k apply as in SQL; and the cache holds nothing of another user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_vector_cache_sees_transactions_that_commit_out_of_order() {
    use engram_core::model::MessageRole;
    use engram_core::store::TranscriptFilter;

    let mut f = Fixture::new(Backend::Postgres).await;
    let pg = f.pg();
    let a: Arc<dyn Store> = pg.clone();
    let b = f.reopen().await;
    assert_eq!(f.pg_last().cached_transcript_rows("t", "u"), None);
    let (t, u, w) = (tenant("t"), user("u"), user("w"));
    a.ensure_embedding_space(MODEL, 4).await.unwrap();
    let msgs: Vec<_> = ["one", "two", "three"]
        .iter()
        .map(|x| message(&t, &u, "c", MessageRole::User, x))
        .collect();
    let ms = a.append_messages(&t, msgs).await.unwrap();
    let theirs = a
        .append_messages(&t, vec![message(&t, &w, "cw", MessageRole::User, "theirs")])
        .await
        .unwrap();
    a.set_message_vectors(
        &t,
        MODEL,
        vec![(ms[0].id, unit(4, 2)), (ms[1].id, unit(4, 3)), (theirs[0].id, unit(4, 1))],
    )
    .await
    .unwrap();
    let q = unit(4, 1);
    let all = TranscriptFilter::user(u.clone());
    let search = |f: TranscriptFilter, k: usize| {
        let (b, t, q) = (b.clone(), t.clone(), q.clone());
        async move {
            b.vector_search_messages(&t, &f, MODEL, &q, k)
                .await
                .unwrap()
                .into_iter()
                .map(|h| (h.0, (h.1 * 1e4).round() / 1e4))
                .collect::<Vec<_>>()
        }
    };
    let sim = |seed: u64| (dot(&unit(4, seed), &q) * 1e4).round() / 1e4;
    assert_eq!(search(all.clone(), 10).await, {
        let mut v = vec![(ms[0].id, sim(2)), (ms[1].id, sim(3))];
        v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
        v
    });
    assert_eq!(f.pg_last().cached_transcript_rows("t", "u"), Some(2), "b answers from memory");

    // An older transaction writes the third message's vector and stays open ...
    let mut older = pg.pool().begin().await.unwrap();
    sqlx::query("UPDATE messages SET embedding = $1::real[]::vector, embedding_model = $2 WHERE tenant_id = 't' AND id = $3")
        .bind(q.clone())
        .bind(MODEL)
        .bind(ms[2].id.0)
        .execute(&mut *older)
        .await
        .unwrap();
    // ... while a newer one commits a vector of the first, which b's next search reads.
    a.set_message_vectors(&t, MODEL, vec![(ms[0].id, unit(4, 4))]).await.unwrap();
    let got = search(all.clone(), 10).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.contains(&(ms[0].id, sim(4))), "b reads the newer commit: {got:?}");
    older.commit().await.unwrap();
    let got = search(all.clone(), 10).await;
    assert_eq!(got.first(), Some(&(ms[2].id, 1.0)), "b reads the older commit too: {got:?}");
    assert_eq!(got.len(), 3);

    // Cleared, and rewritten under another model: gone from b's answer.
    sqlx::query("UPDATE messages SET embedding = NULL, embedding_model = NULL WHERE tenant_id = 't' AND id = $1")
        .bind(ms[2].id.0)
        .execute(pg.pool())
        .await
        .unwrap();
    a.set_message_vectors(&t, "other-model", vec![(ms[1].id, unit(4, 1))]).await.unwrap();
    assert_eq!(search(all.clone(), 10).await, vec![(ms[0].id, sim(4))]);

    // A window and k apply as the SQL ranking applies them.
    let created = ms[0].created_at;
    let after =
        TranscriptFilter { since: Some(created + time::Duration::microseconds(1)), ..all.clone() };
    assert!(search(after, 10).await.is_empty());
    let at = TranscriptFilter {
        since: Some(created),
        until: Some(created + time::Duration::microseconds(1)),
        ..all.clone()
    };
    assert_eq!(search(at, 10).await, vec![(ms[0].id, sim(4))]);
    assert!(search(all.clone(), 0).await.is_empty());
    // The other user's message never shows; their own search finds it.
    let theirs_hits = search(TranscriptFilter::user(w.clone()), 10).await;
    assert_eq!(theirs_hits, vec![(theirs[0].id, 1.0)]);

    // At the default size a user's searches are ranked in SQL until a search counts enough
    // vectors, then go through the cache; erasure sends them back to SQL.
    let c = f.reopen().await;
    let c_pg = f.pg_last();
    c_pg.set_transcript_cache_min_rows(3);
    let v = user("v");
    let vs = a
        .append_messages(
            &t,
            ["a", "b", "c"].iter().map(|x| message(&t, &v, "cv", MessageRole::User, x)).collect(),
        )
        .await
        .unwrap();
    a.set_message_vectors(&t, MODEL, vec![(vs[0].id, unit(4, 1)), (vs[1].id, unit(4, 2))])
        .await
        .unwrap();
    let by_v = TranscriptFilter::user(v.clone());
    let top = |c: Arc<dyn Store>| {
        let (t, by_v, q) = (t.clone(), by_v.clone(), q.clone());
        async move {
            c.vector_search_messages(&t, &by_v, MODEL, &q, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.0)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(top(c.clone()).await, [vs[0].id, vs[1].id]);
    assert_eq!(top(c.clone()).await.len(), 2);
    assert_eq!(c_pg.cached_transcript_rows("t", "v"), None, "two vectors: SQL");
    a.set_message_vectors(&t, MODEL, vec![(vs[2].id, unit(4, 3))]).await.unwrap();
    assert_eq!(top(c.clone()).await.len(), 3, "counted three in SQL");
    assert_eq!(top(c.clone()).await.len(), 3);
    assert_eq!(c_pg.cached_transcript_rows("t", "v"), Some(3), "then through the cache");
    c.erase_user(&t, &v).await.unwrap();
    assert!(top(c.clone()).await.is_empty());
    assert_eq!(c_pg.cached_transcript_rows("t", "v"), None, "erased: back to SQL");
    f.finish().await;
}
