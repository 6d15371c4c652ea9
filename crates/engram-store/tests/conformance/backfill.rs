//! Migrations that derive rows from existing data: run over a store that already holds it.

use engram_core::model::MessageRole;

use engram_core::store::TranscriptFilter;

use crate::harness::{Backend, Fixture, MODEL, message, tenant, unit, user};

/// SQLite's migration 10 undone: the transcript rows' `vector_seq` and its triggers.
const UNDO_SQLITE_10: &str = "\
    DROP TRIGGER messages_vector_seq_ai; DROP TRIGGER messages_vector_seq_au; \
    DROP INDEX messages_vector_seq; ALTER TABLE messages DROP COLUMN vector_seq; \
    DROP TRIGGER summaries_vector_seq_ai; DROP TRIGGER summaries_vector_seq_au; \
    DROP INDEX summaries_vector_seq; ALTER TABLE summaries DROP COLUMN vector_seq; \
    DELETE FROM schema_migrations WHERE version = 10;";

/// SQLite's migration 11 undone: the message index of migration 5 (external content, no
/// context column), rebuilt from the rows, with its triggers and per-row vocabulary.
const UNDO_SQLITE_11: &str = "\
    DROP TRIGGER messages_fts_ai; DROP TRIGGER messages_fts_au; DROP TRIGGER messages_fts_ad; \
    DROP VIEW messages_fts_rows; DROP TABLE messages_fts_vocab; DROP TABLE messages_fts; \
    CREATE VIRTUAL TABLE messages_fts USING fts5 (content, tool_name, content = 'messages', \
        content_rowid = 'rowid', tokenize = 'unicode61 remove_diacritics 2'); \
    INSERT INTO messages_fts (messages_fts) VALUES ('rebuild'); \
    CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN \
        INSERT INTO messages_fts (rowid, content, tool_name) \
        VALUES (new.rowid, new.content, coalesce(new.tool_name, '')); END; \
    CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN \
        INSERT INTO messages_fts (messages_fts, rowid, content, tool_name) \
        VALUES ('delete', old.rowid, old.content, coalesce(old.tool_name, '')); END; \
    CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab (messages_fts, 'row'); \
    DELETE FROM schema_migrations WHERE version = 11;";

/// SQLite's migration 12 undone: keyword indexes without a scope column, counted over the
/// whole store (the memory and summary indexes of migrations 1 and 6 rebuilt from the rows,
/// the message index of migration 11), with their triggers and vocabularies.
fn undo_sqlite_12() -> String {
    let drop = "\
        DROP TRIGGER memories_fts_ai; DROP TRIGGER memories_fts_ad; \
        DROP TRIGGER summaries_fts_ai; DROP TRIGGER summaries_fts_au; DROP TRIGGER summaries_fts_ad; \
        DROP TABLE memories_fts; DROP TABLE summaries_fts; \
        DROP VIEW messages_fts_rows; DROP VIEW keyword_scope_tokens; DROP TABLE keyword_scopes; \
        CREATE VIRTUAL TABLE memories_fts USING fts5 (content, content = 'memories', \
            content_rowid = 'rowid', tokenize = 'unicode61 remove_diacritics 2'); \
        INSERT INTO memories_fts (memories_fts) VALUES ('rebuild'); \
        CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN \
            INSERT INTO memories_fts (rowid, content) VALUES (new.rowid, new.content); END; \
        CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN \
            INSERT INTO memories_fts (memories_fts, rowid, content) \
            VALUES ('delete', old.rowid, old.content); END; \
        CREATE VIRTUAL TABLE memories_fts_vocab USING fts5vocab (memories_fts, 'row'); \
        CREATE VIRTUAL TABLE summaries_fts USING fts5 (content, content = 'summaries', \
            content_rowid = 'rowid', tokenize = 'unicode61 remove_diacritics 2'); \
        INSERT INTO summaries_fts (summaries_fts) VALUES ('rebuild'); \
        CREATE TRIGGER summaries_fts_ai AFTER INSERT ON summaries BEGIN \
            INSERT INTO summaries_fts (rowid, content) VALUES (new.rowid, new.content); END; \
        CREATE TRIGGER summaries_fts_ad AFTER DELETE ON summaries BEGIN \
            INSERT INTO summaries_fts (summaries_fts, rowid, content) \
            VALUES ('delete', old.rowid, old.content); END; \
        CREATE VIRTUAL TABLE summaries_fts_vocab USING fts5vocab (summaries_fts, 'row');";
    // Migration 11 drops the message index of migration 12 and builds its own.
    let messages = include_str!("../../migrations/sqlite/0011_message_context.sql");
    format!("{drop} {messages} DELETE FROM schema_migrations WHERE version = 12;")
}

/// The statements of `sql` that start with each of `heads`, each up to its end (`END;` of a
/// trigger, or the first `;` at a line's end).
fn statements(sql: &str, heads: &[&str]) -> String {
    heads
        .iter()
        .map(|h| {
            let at = sql.find(h).unwrap_or_else(|| panic!("{h} not in the migration"));
            let rest = &sql[at..];
            let end = if h.starts_with("CREATE TRIGGER") {
                rest.find("\nEND;").unwrap() + 5
            } else {
                rest.find(";\n").unwrap() + 1
            };
            rest[..end].to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The web UI's sign-ins undone (SQLite's migration 20, PostgreSQL's 21), before any older
/// migration is: the runner applies what is past the newest version recorded.
const UNDO_UI_SQLITE: &str =
    "DROP TABLE ui_sessions; DELETE FROM schema_migrations WHERE version = 20;";

/// SQLite's migration 19 undone (after 20's): rows indexed by their text, no `keyword_text` (emptied first
/// through its triggers, which re-index the rows), and migration 12's triggers and view.
fn undo_sqlite_19() -> String {
    let m12 = include_str!("../../migrations/sqlite/0012_keyword_scopes.sql");
    let again = statements(
        m12,
        &[
            "CREATE TRIGGER memories_fts_ai",
            "CREATE TRIGGER summaries_fts_ai",
            "CREATE TRIGGER summaries_fts_au",
            "CREATE VIEW messages_fts_rows",
            "CREATE TRIGGER messages_fts_ai",
            "CREATE TRIGGER messages_fts_au",
        ],
    );
    format!(
        "{UNDO_UI_SQLITE} UPDATE memories SET keyword_text = NULL WHERE keyword_text IS NOT NULL; \
         UPDATE messages SET keyword_text = NULL WHERE keyword_text IS NOT NULL; \
         UPDATE summaries SET keyword_text = NULL WHERE keyword_text IS NOT NULL; \
         DROP TRIGGER memories_fts_ai; DROP TRIGGER memories_fts_au; \
         DROP TRIGGER summaries_fts_ai; DROP TRIGGER summaries_fts_au; \
         DROP TRIGGER messages_fts_ai; DROP TRIGGER messages_fts_au; DROP VIEW messages_fts_rows; \
         ALTER TABLE memories DROP COLUMN keyword_text; \
         ALTER TABLE messages DROP COLUMN keyword_text; \
         ALTER TABLE summaries DROP COLUMN keyword_text; \
         {again} DELETE FROM schema_migrations WHERE version = 19;"
    )
}

/// PostgreSQL's migration 20 undone (after 21's, the web UI's sign-ins): no statistics trigger on a memory's `fts_text` (the
/// texts themselves are set back by the test that needs it).
const UNDO_PG_20: &str = "\
    DROP TABLE ui_sessions; DELETE FROM schema_migrations WHERE version = 21; \
    DROP TRIGGER memories_fts_stats_update ON memories; \
    DROP FUNCTION engram_memory_stats_update; \
    DELETE FROM schema_migrations WHERE version = 20;";

/// Migrations 19 (PostgreSQL; 18 on SQLite) to 13 undone, after the newer ones'
/// ([`undo_sqlite_19`], [`UNDO_PG_20`]): no index of finished jobs, of job
/// counts, of active contents, or of the messages without a vector, and no context-session
/// terms (the record of the messages' dates is kept: its migration creates it only if absent). Undone first whenever an older migration is:
/// the runner applies what is past the newest version recorded.
const UNDO_13_17: &str = "DROP INDEX jobs_done; DROP INDEX jobs_done_kind; DROP INDEX jobs_tenant_status; \
    DROP INDEX messages_unembedded; DROP INDEX memories_active_content; \
    ALTER TABLE context_sessions DROP COLUMN params; \
    DELETE FROM schema_migrations WHERE version IN (13, 14, 15, 16, 17, 18, 19);";

/// PostgreSQL's migration 12 undone: no writer transaction ids on transcript vectors.
const UNDO_PG_12: &str = "\
    DROP FUNCTION engram_vector_xid CASCADE; \
    ALTER TABLE messages DROP COLUMN vector_xid; ALTER TABLE summaries DROP COLUMN vector_xid; \
    DELETE FROM schema_migrations WHERE version = 12;";

/// PostgreSQL's migration 11 undone: no transcript statistics (the functions' declared costs
/// are set again by the migration, to the same values).
const UNDO_PG_11: &str = "\
    DROP TABLE transcript_fts_stats; \
    DROP FUNCTION engram_transcript_stats_insert, engram_message_stats_delete, \
        engram_summary_stats_delete, engram_message_stats_update, engram_summary_stats_update \
        CASCADE; \
    DELETE FROM schema_migrations WHERE version = 11;";

/// PostgreSQL's migration 10 undone: no message context.
const UNDO_PG_10: &str = "\
    DROP TRIGGER messages_context ON messages; DROP TRIGGER messages_context_next ON messages; \
    DROP INDEX messages_ctx_fts_scoped; ALTER TABLE messages DROP COLUMN ctx_fts; \
    ALTER TABLE messages RESET (toast_tuple_target); \
    DROP FUNCTION engram_message_context_new, engram_message_context_next, \
        engram_message_context; \
    DELETE FROM schema_migrations WHERE version = 10;";

/// Run statements on a SQLite fixture's database, beside the store.
async fn sqlite_raw(f: &Fixture, sql: &str) {
    let path = f.dir.as_ref().unwrap().path().join("engram.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(&pool).await.unwrap();
    pool.close().await;
}

/// Migration 9 records the speakers of the messages appended before it (the `Name: `
/// labels that pass `engram_core::speaker::label`).
async fn speakers_of_earlier_messages_are_backfilled(backend: Backend) {
    let mut f = Fixture::new(backend).await;
    let (t, u, u2) = (tenant("t"), user("u"), user("u2"));
    let say =
        |u: &engram_core::model::UserId, text: &str| message(&t, u, "c", MessageRole::User, text);
    let msgs = [
        "Maria: I got a puppy!",
        "John: What's her name?",
        "Dr. Ana Ruiz: two a day",
        "I said this: not a label",
        "lower: not a label",
        "Time 10:30 is fine",
    ];
    f.store.append_messages(&t, msgs.iter().map(|m| say(&u, m)).collect()).await.unwrap();
    f.store
        .append_messages(&t, vec![message(&t, &u2, "c2", MessageRole::User, "Émile: salut")])
        .await
        .unwrap();
    let undo = "DROP TABLE speakers; DELETE FROM schema_migrations WHERE version = 9";
    match backend {
        Backend::Sqlite => {
            // Migrations 10 to 14 came after it: undone first.
            sqlite_raw(
                &f,
                &format!(
                    "{} {UNDO_13_17} {} {UNDO_SQLITE_11} {UNDO_SQLITE_10} {undo}",
                    undo_sqlite_19(),
                    undo_sqlite_12()
                ),
            )
            .await;
        }
        Backend::Postgres => {
            let sql =
                format!("{UNDO_PG_20} {UNDO_13_17} {UNDO_PG_12} {UNDO_PG_11} {UNDO_PG_10} {undo}");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(f.pg().pool()).await.unwrap();
        }
    }
    let s = f.reopen().await;
    assert_eq!(s.speakers(&t, &u).await.unwrap(), ["Dr. Ana Ruiz", "John", "Maria"]);
    // A label that starts with a non-ASCII capital is recorded by PostgreSQL's backfill
    // only (SQLite's compares ASCII); a new message of that speaker records it on both.
    let emile = s.speakers(&t, &u2).await.unwrap();
    match backend {
        Backend::Sqlite => assert!(emile.is_empty(), "{emile:?}"),
        Backend::Postgres => assert_eq!(emile, ["Émile"]),
    }
    s.append_messages(&t, vec![message(&t, &u2, "c2", MessageRole::User, "Émile: encore")])
        .await
        .unwrap();
    assert_eq!(s.speakers(&t, &u2).await.unwrap(), ["Émile"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speakers_backfilled_on_sqlite() {
    speakers_of_earlier_messages_are_backfilled(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speakers_backfilled_on_postgres() {
    speakers_of_earlier_messages_are_backfilled(Backend::Postgres).await;
}

/// Message vectors stored before SQLite's migration 10 (no `vector_seq`) are searched after
/// it, and a later re-embed of one of them is seen by a store that has already searched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_vectors_from_before_their_counter_are_searched_on_sqlite() {
    let mut f = Fixture::new(Backend::Sqlite).await;
    let (t, u) = (tenant("t"), user("u"));
    f.store.ensure_embedding_space(MODEL, 4).await.unwrap();
    sqlite_raw(
        &f,
        &format!(
            "{} {UNDO_13_17} {} {UNDO_SQLITE_11} {UNDO_SQLITE_10}",
            undo_sqlite_19(),
            undo_sqlite_12()
        ),
    )
    .await;
    let say = |text: &str| message(&t, &u, "c", MessageRole::User, text);
    let ms = f.store.append_messages(&t, vec![say("one"), say("two")]).await.unwrap();
    let old = vec![(ms[0].id, unit(4, 1)), (ms[1].id, unit(4, 2))];
    f.store.set_message_vectors(&t, MODEL, old).await.unwrap();
    let s = f.reopen().await;
    let all = TranscriptFilter::user(u.clone());
    let hits = s.vector_search_messages(&t, &all, MODEL, &unit(4, 1), 10).await.unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![ms[0].id, ms[1].id]);
    assert!((hits[0].1 - 1.0).abs() < 1e-5, "{hits:?}");
    s.set_message_vectors(&t, MODEL, vec![(ms[1].id, unit(4, 3))]).await.unwrap();
    let hits = s.vector_search_messages(&t, &all, MODEL, &unit(4, 3), 1).await.unwrap();
    assert_eq!(hits[0].0, ms[1].id);
    assert!((hits[0].1 - 1.0).abs() < 1e-5, "the re-embedded vector is read: {hits:?}");
}

/// Messages appended before the keyword index held each message's context (SQLite's
/// migration 11, PostgreSQL's 10) are found by their predecessors' words after it, and the
/// triggers it adds keep later appends and fills in step.
async fn message_context_of_earlier_messages_is_backfilled(backend: Backend) {
    let mut f = Fixture::new(backend).await;
    let (t, u) = (tenant("t"), user("u"));
    let say = |conv: &str, text: &str| message(&t, &u, conv, MessageRole::User, text);
    let talk = ["Have you been to Kyoto?", "Twice, in spring.", "Which temples?", "Kinkaku-ji."];
    let stored =
        f.store.append_messages(&t, talk.iter().map(|x| say("c1", x)).collect()).await.unwrap();
    let filler = (0..6).map(|i| say("c2", &format!("filler {i}"))).collect();
    f.store.append_messages(&t, filler).await.unwrap();
    match backend {
        Backend::Sqlite => {
            sqlite_raw(
                &f,
                &format!("{} {UNDO_13_17} {} {UNDO_SQLITE_11}", undo_sqlite_19(), undo_sqlite_12()),
            )
            .await
        }
        Backend::Postgres => {
            let sql = format!("{UNDO_PG_20} {UNDO_13_17} {UNDO_PG_12} {UNDO_PG_11} {UNDO_PG_10}");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(f.pg().pool()).await.unwrap();
        }
    }
    let all = TranscriptFilter::user(u.clone());
    let s = f.reopen().await;
    let hits = s.text_search_messages(&t, &all, "kyoto", 10).await.unwrap();
    assert_eq!(
        hits.iter().map(|h| h.0).collect::<Vec<_>>(),
        vec![stored[0].id, stored[1].id, stored[2].id],
        "the question, then the two after it: {hits:?}"
    );
    assert!(hits[1..].iter().all(|h| h.1 == 0.0), "no coverage from context: {hits:?}");
    let more = s.append_messages(&t, vec![say("c1", "The golden one.")]).await.unwrap();
    let hits = s.text_search_messages(&t, &all, "temples", 10).await.unwrap();
    assert_eq!(
        hits.iter().map(|h| h.0).collect::<std::collections::BTreeSet<_>>(),
        [stored[2].id, stored[3].id, more[0].id].into_iter().collect(),
        "{hits:?}"
    );
    assert_eq!(hits[0].0, stored[2].id);
    if let Backend::Postgres = backend {
        // Migration 11 counted the rows it found, and the triggers the message after it.
        let wrong: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT tenant_id, user_id, count(*) AS rows, \
             sum(length(fts) + length(ctx_fts)) AS len FROM messages GROUP BY 1, 2) x \
             FULL JOIN (SELECT * FROM transcript_fts_stats WHERE source = 'messages') s \
             USING (tenant_id, user_id) WHERE x.rows IS DISTINCT FROM s.rows \
             OR x.len IS DISTINCT FROM s.len",
        )
        .fetch_one(f.pg().pool())
        .await
        .unwrap();
        assert_eq!(wrong, 0, "transcript statistics of earlier messages");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_context_backfilled_on_sqlite() {
    message_context_of_earlier_messages_is_backfilled(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_context_backfilled_on_postgres() {
    message_context_of_earlier_messages_is_backfilled(Backend::Postgres).await;
}

/// Rows indexed before SQLite's migration 12 (keyword statistics over the whole store) get
/// their scope: each user's counts are right, another user's words no longer hide a row,
/// erasing the last row of a scope removes it, and later writes are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyword_scopes_of_earlier_rows_are_backfilled_on_sqlite() {
    use crate::harness::{memory, new_row};
    use engram_core::store::MemoryFilter;
    let mut f = Fixture::new(Backend::Sqlite).await;
    let (t, a, b) = (tenant("t"), user("a"), user("b"));
    sqlite_raw(&f, &format!("{} {UNDO_13_17} {}", undo_sqlite_19(), undo_sqlite_12())).await;
    let facts = ["I bought a red kayak", "My sister lives in Lyon", "Night shifts", "Tea"];
    let mine: Vec<_> = facts.iter().map(|x| new_row(memory(&t, &a, x), None)).collect();
    f.store.insert_memories(&t, mine.clone()).await.unwrap();
    let theirs = (0..6).map(|i| new_row(memory(&t, &b, &format!("kayak {i}")), None)).collect();
    f.store.insert_memories(&t, theirs).await.unwrap();
    let said = (0..3).map(|i| message(&t, &b, "c", MessageRole::User, &format!("kayak {i}")));
    f.store.append_messages(&t, said.collect()).await.unwrap();

    let s = f.reopen().await;
    let only = |u: &engram_core::model::UserId| MemoryFilter {
        user_id: Some(u.clone()),
        ..Default::default()
    };
    let hits = s.text_search(&t, &only(&a), "kayak", 10).await.unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), vec![mine[0].memory.id]);
    // b has "kayak" in every row: dropped for b beside another word, as before (alone it
    // is the whole query, and finds b's six).
    assert!(s.text_search(&t, &only(&b), "kayak tea", 10).await.unwrap().is_empty());
    assert_eq!(s.text_search(&t, &only(&b), "kayak", 10).await.unwrap().len(), 6);
    let b_msgs = TranscriptFilter::user(b.clone());
    assert_eq!(s.text_search_messages(&t, &b_msgs, "kayak", 10).await.unwrap().len(), 3);

    let counts = async || {
        let path = f.dir.as_ref().unwrap().path().join("engram.db");
        let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", path.display()))
            .await
            .unwrap();
        let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(
            "SELECT tenant_id, user_id, memories, messages FROM keyword_scopes \
             ORDER BY tenant_id, user_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows
    };
    // The whole store, the tenant, then each user: (tenant, user, memories, messages).
    let row = |t: &str, u: &str, m, n| (t.to_string(), u.to_string(), m, n);
    assert_eq!(
        counts().await,
        vec![row("", "", 10, 3), row("t", "", 10, 0), row("t", "a", 4, 0), row("t", "b", 6, 3)]
    );
    s.append_messages(&t, vec![message(&t, &a, "ca", MessageRole::User, "hello")]).await.unwrap();
    s.erase_user(&t, &b).await.unwrap();
    assert_eq!(
        counts().await,
        vec![row("", "", 4, 1), row("t", "", 4, 0), row("t", "a", 4, 1)],
        "b's scope is gone"
    );
}

/// Messages appended before their dates were recorded (migration 16 on SQLite, 17 on
/// PostgreSQL; simulated by emptying the record) are found by the days they name once
/// `index_message_dates` (what `engram backfill dates` calls) has read them, once.
async fn dates_of_earlier_messages_are_backfilled(backend: Backend) {
    use time::macros::datetime;
    let mut f = Fixture::new(backend).await;
    let (t, u) = (tenant("t"), user("u"));
    let mut m = message(&t, &u, "c", MessageRole::User, "Three years ago I moved to Lisbon.");
    m.created_at = datetime!(2023-10-02 19:00 UTC);
    let other = message(&t, &u, "c", MessageRole::User, "Nothing dated.");
    let stored = f.store.append_messages(&t, vec![m, other]).await.unwrap();
    let empty = "DELETE FROM message_dates";
    match backend {
        Backend::Sqlite => sqlite_raw(&f, empty).await,
        Backend::Postgres => {
            sqlx::raw_sql(empty).execute(f.pg().pool()).await.unwrap();
        }
    }
    let s = f.reopen().await;
    let all = TranscriptFilter::user(u.clone());
    let day = datetime!(2020-06-01 0:00 UTC);
    assert!(s.messages_said_about(&t, &all, day, day, 10).await.unwrap().is_empty());
    assert_eq!(s.index_message_dates(&t, &stored).await.unwrap(), 1);
    let found = s.messages_said_about(&t, &all, day, day, 10).await.unwrap();
    assert_eq!(found.iter().map(|m| m.id).collect::<Vec<_>>(), [stored[0].id]);
    assert_eq!(s.index_message_dates(&t, &stored).await.unwrap(), 0, "idempotent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dates_backfilled_on_sqlite() {
    dates_of_earlier_messages_are_backfilled(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dates_backfilled_on_postgres() {
    dates_of_earlier_messages_are_backfilled(Backend::Postgres).await;
}

/// Rows written before words without spaces were split (SQLite's migration 19, PostgreSQL's
/// 20) are found by a word inside their sentence once the migration has run: facts, messages
/// and summaries; PostgreSQL's statistics stay exact.
async fn unspaced_words_of_earlier_rows_are_backfilled(backend: Backend) {
    use crate::harness::{memory, new_row};
    use crate::summaries::{new, summary};
    use engram_core::store::MemoryFilter;
    use engram_core::store::SummaryClaim;
    let mut f = Fixture::new(backend).await;
    let (t, u) = (tenant("t"), user("u"));
    f.store.ensure_embedding_space(MODEL, 4).await.unwrap();
    let facts = ["用户住在北京，喜欢吃饺子。", "用户在上海工作。", "The user plays the cello."];
    let rows: Vec<_> = facts.iter().map(|x| new_row(memory(&t, &u, x), None)).collect();
    f.store.insert_memories(&t, rows.clone()).await.unwrap();
    let said = ["昨日は東京で寿司を食べました。", "いいですね！", "Tokyo again?"];
    let said = said.iter().map(|x| message(&t, &u, "c", MessageRole::User, x)).collect();
    let said = f.store.append_messages(&t, said).await.unwrap();
    let leaf = summary(&t, &u, "c", 0, "二人は東京の寿司について話した。", (0, 2), 3);
    let claim = SummaryClaim::Messages { after_seq: 0, through_seq: 3 };
    let sources = said.iter().map(|m| m.id.0).collect();
    assert!(f.store.insert_summary(&t, new(leaf.clone(), sources, 1, claim)).await.unwrap());
    // Written now, the rows are split already.
    let only = MemoryFilter { user_id: Some(u.clone()), ..Default::default() };
    let found = f.store.text_search(&t, &only, "北京", 10).await.unwrap();
    assert_eq!(found.iter().map(|h| h.0).collect::<Vec<_>>(), [rows[0].memory.id]);
    match backend {
        Backend::Sqlite => {
            sqlite_raw(&f, &undo_sqlite_19()).await;
        }
        Backend::Postgres => {
            // The texts as the store wrote them before: runs of letters, whole.
            let old = |x: &str| {
                x.split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .map(str::to_lowercase)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let pool = f.pg().pool().clone();
            for (table, id, text) in [
                ("memories", rows[0].memory.id.0.to_string(), old(facts[0])),
                ("memories", rows[1].memory.id.0.to_string(), old(facts[1])),
                ("messages", said[0].id.0.to_string(), old(&said[0].content)),
                ("messages", said[1].id.0.to_string(), old(&said[1].content)),
                ("summaries", leaf.id.to_string(), old(&leaf.content)),
            ] {
                let sql = format!("UPDATE {table} SET fts_text = $1 WHERE id::text = $2");
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(text)
                    .bind(id)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
            sqlx::raw_sql(UNDO_PG_20).execute(&pool).await.unwrap();
        }
    }
    let all = TranscriptFilter::user(u.clone());
    // Before the migration, as a store of the last version had them: not found.
    assert!(f.store.text_search(&t, &only, "北京", 10).await.unwrap().is_empty());
    assert!(f.store.text_search_summaries(&t, &all, "寿司", 10).await.unwrap().is_empty());
    let s = f.reopen().await;
    let found = s.text_search(&t, &only, "北京", 10).await.unwrap();
    assert_eq!(found.iter().map(|h| h.0).collect::<Vec<_>>(), [rows[0].memory.id]);
    assert_eq!(found[0].1, 1.0, "the whole query: {found:?}");
    let found = s.text_search(&t, &only, "上海的天气", 10).await.unwrap();
    assert_eq!(found.iter().map(|h| h.0).collect::<Vec<_>>(), [rows[1].memory.id]);
    let found = s.text_search_messages(&t, &all, "寿司", 10).await.unwrap();
    assert_eq!(found[0].0, said[0].id, "{found:?}");
    let found = s.text_search_summaries(&t, &all, "寿司", 10).await.unwrap();
    assert_eq!(found.iter().map(|h| h.0).collect::<Vec<_>>(), [leaf.id]);
    assert!(s.text_search(&t, &only, "量子色动力学", 10).await.unwrap().is_empty());
    if let Backend::Postgres = backend {
        let wrong: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT m.tenant_id, m.user_id, l AS lexeme, count(*) AS rows \
             FROM memories m, unnest(tsvector_to_array(m.fts)) AS l GROUP BY 1, 2, 3 \
             UNION ALL SELECT tenant_id, user_id, '', count(*) FROM memories GROUP BY 1, 2) x \
             FULL JOIN memory_fts_stats s USING (tenant_id, user_id, lexeme) \
             WHERE x.rows IS DISTINCT FROM s.rows",
        )
        .fetch_one(f.pg().pool())
        .await
        .unwrap();
        assert_eq!(wrong, 0, "memory statistics after the backfill");
        let len: i64 = sqlx::query_scalar(
            "SELECT s.len - (SELECT sum(length(fts)) FROM memories) FROM memory_fts_stats s \
             WHERE lexeme = ''",
        )
        .fetch_one(f.pg().pool())
        .await
        .unwrap();
        assert_eq!(len, 0, "memory lengths after the backfill");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unspaced_words_backfilled_on_sqlite() {
    unspaced_words_of_earlier_rows_are_backfilled(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unspaced_words_backfilled_on_postgres() {
    unspaced_words_of_earlier_rows_are_backfilled(Backend::Postgres).await;
}
