//! Migrations that derive rows from existing data: run over a store that already holds it.

use engram_core::model::MessageRole;

use crate::harness::{Backend, Fixture, message, tenant, user};

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
            let path = f.dir.as_ref().unwrap().path().join("engram.db");
            let pool =
                sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display())).await.unwrap();
            sqlx::raw_sql(undo).execute(&pool).await.unwrap();
            pool.close().await;
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
