//! GDPR erasure leaves nothing of the user in any table or full-text index (looked up inside
//! the SQLite file, or the PostgreSQL database), and export is complete.

use reqwest::StatusCode;
use serde_json::json;
use sqlx::Row;

use crate::helpers::{Backend, Server};

async fn erasure_removes_every_row_and_index_entry_of_the_user(backend: Backend) {
    let s = Server::on(backend).await;
    let id = s.remember("victim", "The user's passport number is ZX991 quokka.").await;
    s.req(
        "PATCH",
        &format!("/v1/memories/{id}"),
        Some(json!({ "content": "The user's passport expired; quokka trip cancelled." })),
    )
    .await;
    s.post("/v1/conversations/conv-v/messages", json!({ "user_id": "victim", "messages": [{ "role": "user", "content": "my quokka photos", "turn_id": "t1" }] })).await;
    s.post("/v1/search", json!({ "query": "quokka", "user_id": "victim", "turn_id": "t1" })).await;
    s.post("/v1/context", json!({ "user_id": "victim", "session_id": "sess" })).await;
    s.remember("keeper", "The user also likes quokka documentaries.").await;
    // Enough of the victim's rows that whole pages are freed by the erasure (a page freed
    // whole kept its bytes under `secure_delete = FAST`: a tester read them back).
    let notes: Vec<serde_json::Value> = (0..200)
        .map(|i| json!({ "content": format!("Victim note {i}: the ptarmigan count was {i} lorem ipsum dolor sit amet."), "user_id": "victim" }))
        .collect();
    let (st, b) = s.post("/v1/memories/batch", json!({ "memories": notes, "dedup": false })).await;
    assert!(st.is_success(), "{b}");

    let (_, x) = s.get("/v1/users/victim/export").await;
    assert_eq!(x["memories"].as_array().unwrap().len(), 202, "export holds both versions: {x}");
    assert_eq!(x["messages"].as_array().unwrap().len(), 1);
    assert!(x["events"].as_array().unwrap().len() >= 3);

    let (st, er) = s.req("DELETE", "/v1/users/victim", None).await;
    assert_eq!(st, StatusCode::OK);
    let e = &er["erased"];
    assert_eq!(
        (e["memories"].as_u64(), e["messages"].as_u64(), e["conversations"].as_u64()),
        (Some(202), Some(1), Some(1)),
        "{er}"
    );
    assert_eq!((e["recalls"].as_u64(), e["context_sessions"].as_u64()), (Some(1), Some(1)), "{er}");

    // Look inside the database itself.
    match backend {
        Backend::Sqlite => sqlite_holds_nothing_of(&s.db().dir().join("engram.db")).await,
        Backend::Postgres => postgres_holds_nothing_of(s.db()).await,
    }
    // The other user is untouched and search works for them.
    assert_eq!(s.search("keeper", "quokka").await, ["The user also likes quokka documentaries."]);
    assert!(s.search("victim", "quokka").await.is_empty());
}

/// Every SQLite table with a `user_id` column holds no row of the victim, and neither the
/// full-text indexes nor their vocabularies know the victim's words; nor do the bytes of
/// the write-ahead log (found by a session: the erased text was still in the log until a
/// checkpoint), nor the database file's pages where the rows were (`secure_delete`), nor
/// the full-text indexes' own pages, which keep words lowercased ("zx991") and kept a
/// deleted row's words until their segments were merged.
async fn sqlite_holds_nothing_of(path: &std::path::Path) {
    let holds = |file: &std::path::Path, secret: &str| {
        let bytes = std::fs::read(file).unwrap_or_default();
        bytes.windows(secret.len()).any(|w| w == secret.as_bytes())
    };
    let wal = path.with_extension("db-wal");
    for secret in ["ZX991", "passport", "photos"] {
        assert!(!holds(&wal, secret), "{} still holds '{secret}'", wal.display());
    }
    for secret in [
        "ZX991",
        "The user's passport expired",
        "my quokka photos",
        "zx991",
        "passport",
        "photos",
        "ptarmigan",
    ] {
        assert!(!holds(path, secret), "{} still holds '{secret}'", path.display());
    }
    let url = format!("sqlite://{}?mode=ro", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let tables: Vec<String> = sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%user_id%' AND name NOT LIKE '%fts%'")
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(tables.len() >= 10, "{tables:?}");
    for t in &tables {
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {t} WHERE user_id = 'victim'"
        )))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
        assert_eq!(n, 0, "table {t} still holds rows of the erased user");
    }
    for (fts, expect) in [("memories_fts", 1), ("messages_fts", 0)] {
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {fts} WHERE {fts} MATCH 'quokka'"
        )))
        .fetch_one(&pool)
        .await
        .unwrap()
        .get(0);
        assert_eq!(n, expect, "{fts}: only the other user's row may match");
    }
    // The indexes' vocabularies, read through fts5vocab tables of this connection.
    let mut c = pool.acquire().await.unwrap();
    for (fts, word) in [("memories_fts", "passport"), ("messages_fts", "photos")] {
        let vocab = format!("temp.{fts}_vocab");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE VIRTUAL TABLE {vocab} USING fts5vocab (main, {fts}, 'row')"
        )))
        .execute(&mut *c)
        .await
        .unwrap();
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {vocab} WHERE term = '{word}'"
        )))
        .fetch_one(&mut *c)
        .await
        .unwrap()
        .get(0);
        assert_eq!(n, 0, "{fts} still indexes '{word}'");
    }
}

/// Every PostgreSQL table with a `user_id` column holds no row of the victim; the
/// `tsvector` columns live in the rows, so no index entry of the victim's text is left
/// either (checked: only the other user's memory matches, and no message does).
async fn postgres_holds_nothing_of(db: &crate::helpers::Db) {
    let mut c = db.pg().await;
    let tables: Vec<String> = sqlx::query(
        "SELECT table_name::text FROM information_schema.columns \
         WHERE table_schema = 'public' AND column_name = 'user_id' ORDER BY 1",
    )
    .fetch_all(&mut c)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert!(tables.len() >= 10, "{tables:?}");
    for t in &tables {
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {t} WHERE user_id = 'victim'"
        )))
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
        assert_eq!(n, 0, "table {t} still holds rows of the erased user");
    }
    for (table, expect) in [("memories", 1), ("messages", 0)] {
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE fts @@ to_tsquery('simple', 'quokka')"
        )))
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
        assert_eq!(n, expect, "{table}: only the other user's row may match");
    }
    for (table, word) in [("memories", "passport"), ("messages", "photos")] {
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE fts @@ to_tsquery('simple', '{word}') \
             OR content ILIKE '%{word}%'"
        )))
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
        assert_eq!(n, 0, "{table} still holds '{word}'");
    }
}

on_both_backends!(erasure_removes_every_row_and_index_entry_of_the_user,);
