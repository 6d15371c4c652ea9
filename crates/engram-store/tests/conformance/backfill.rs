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
            // Migration 10 (SQLite only) came after it: undone first.
            sqlite_raw(&f, &format!("{UNDO_SQLITE_10} {undo}")).await;
        }
        Backend::Postgres => {
            sqlx::raw_sql(undo).execute(f.pg().pool()).await.unwrap();
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
    sqlite_raw(&f, UNDO_SQLITE_10).await;
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
