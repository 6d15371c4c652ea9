//! A store that cannot do its work right now says so with `StoreUnavailable` (503
//! `store_unavailable` over HTTP, a retry for a job), not an internal error: here SQLite's
//! write lock held by another process past the busy timeout. The PostgreSQL side (server
//! gone, connection cut) is checked over HTTP in `crates/engram/tests/it/outage.rs`.

use engram_core::error::Error;
use engram_core::store::prelude::*;
use sqlx::Connection;

use crate::harness::{memory, new_row, tenant, user};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_busy_past_its_timeout_is_unavailable_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = engram_store::open_sqlite(dir.path()).await.unwrap();
    let (t, u) = (tenant("t"), user("u"));
    // Another process holds the write lock.
    let url = format!("sqlite://{}", dir.path().join("engram.db").display());
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut other).await.unwrap();

    let m = memory(&t, &u, "written while the database was locked");
    let r = store.insert_memories(&t, vec![new_row(m.clone(), None)]).await;
    assert!(matches!(r, Err(Error::StoreUnavailable(_))), "{r:?}");

    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    assert!(store.get_memory(&t, m.id).await.unwrap().is_none());
    store.insert_memories(&t, vec![new_row(m.clone(), None)]).await.unwrap();
    assert!(store.get_memory(&t, m.id).await.unwrap().is_some());
}

/// A write that SQLite rolls back by itself (a full disk: `SQLITE_FULL` ends the transaction;
/// here a trigger's `RAISE(ROLLBACK)`, which does the same) fails that write only: the next
/// writes succeed. Found by a tester: after one "database or disk is full" every write was a
/// 500 until a restart, because the connection pool kept a connection that believed itself
/// still inside the rolled-back transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_sqlite_rolled_back_by_itself_spoils_no_later_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = engram_store::open_sqlite(dir.path()).await.unwrap();
    let (t, u) = (tenant("t"), user("u"));
    let url = format!("sqlite://{}", dir.path().join("engram.db").display());
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TRIGGER full_disk BEFORE INSERT ON memories WHEN new.content = 'no room' \
         BEGIN SELECT RAISE(ROLLBACK, 'database or disk is full'); END;",
    )
    .execute(&mut other)
    .await
    .unwrap();
    other.close().await.unwrap();

    let full = memory(&t, &u, "no room");
    assert!(store.insert_memories(&t, vec![new_row(full.clone(), None)]).await.is_err());
    for i in 0..3 {
        let m = memory(&t, &u, &format!("written after the disk had room again {i}"));
        store.insert_memories(&t, vec![new_row(m.clone(), None)]).await.unwrap();
        assert!(store.get_memory(&t, m.id).await.unwrap().is_some());
    }
    assert!(store.get_memory(&t, full.id).await.unwrap().is_none());
    store.erase_user(&t, &u).await.unwrap();
}
