//! `engram migrate`: a SQLite store built through the real server (two tenants, keys of
//! every role, an agent with settings, edits, a forget, ratings, a recalled turn, a
//! conversation, a profile fact, a context session) is copied to PostgreSQL, and a server on
//! PostgreSQL then behaves as the old one did: the same exports, history, search by keyword
//! and paraphrase on the copied vectors (bit for bit, never re-embedded), keys with their
//! roles, tenant isolation, the rating cascade of a turn recalled before the move. And the
//! refusals: a target with data, a bad or unreachable URL, a missing dir, mixed vectors.

use std::collections::BTreeMap;
use std::path::Path;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Row;

use crate::helpers::Bounded as _;
use crate::helpers::{Backend, Client, Db, Server, assert_error, contents, engram};

pub(crate) fn key(db: &Db, args: &[&str]) -> String {
    let mut a = vec!["keys", "create", "--json"];
    a.extend_from_slice(args);
    let (ok, out, err) = db.cli(&a);
    assert!(ok, "keys create: {err}");
    serde_json::from_str::<Value>(&out).unwrap()["key"].as_str().unwrap().to_string()
}

/// `engram migrate` with these arguments; (success, stdout, stderr).
fn migrate(args: &[&str]) -> (bool, String, String) {
    let scratch = tempfile::tempdir().unwrap();
    let out =
        engram(scratch.path()).arg("migrate").args(args).output_bounded().expect("run engram");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[track_caller]
fn created(r: (StatusCode, Value)) -> String {
    assert_eq!(r.0, StatusCode::CREATED, "{}", r.1);
    r.1["memory"]["id"].as_str().unwrap().to_string()
}

/// Every memory vector of the SQLite file, by id.
async fn sqlite_vectors(dir: &Path) -> BTreeMap<String, (Vec<u8>, String)> {
    let url = format!("sqlite://{}?mode=ro", dir.join("engram.db").display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("SELECT id, embedding, embedding_model FROM memories WHERE embedding IS NOT NULL")
        .fetch_all(&pool)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("id"), (r.get("embedding"), r.get("embedding_model"))))
        .collect()
}

/// Every memory vector of the PostgreSQL database, by id, as little-endian f32 bytes.
async fn pg_vectors(url: &str) -> BTreeMap<String, (Vec<u8>, String)> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    // `vector` in its text form holds the shortest decimal that reads back as the same f32.
    sqlx::query(
        "SELECT id::text AS id, embedding::real[] AS v, embedding_model FROM memories WHERE embedding IS NOT NULL",
    )
    .fetch_all(&mut c)
    .await
    .unwrap()
    .iter()
    .map(|r| {
        let v: Vec<f32> = r.get("v");
        (r.get("id"), (v.iter().flat_map(|x| x.to_le_bytes()).collect(), r.get("embedding_model")))
    })
    .collect()
}

pub(crate) struct Keys {
    pub acme: String,
    pub globex: String,
    pub support: String,
    pub alice: String,
}

/// The old store, built as users would through the SQLite server. Returns the ids of the
/// edited fact's successor, the fact recalled for turn t-1 and the message of that turn.
pub(crate) async fn build(s: &Server, k: &Keys) -> (String, String, String) {
    let acme = s.with_key(&k.acme);
    let globex = s.with_key(&k.globex);
    let home = created(
        acme.post("/v1/memories", json!({ "content": "The user lives in Bengaluru.", "user_id": "alice",
            "category": "fact", "importance": 8, "metadata": { "origin": "onboarding", "tags": ["home"] } }))
            .await,
    );
    let violin = created(
        acme.post(
            "/v1/memories",
            json!({ "content": "The user's daughter Maya plays the violin.", "user_id": "alice" }),
        )
        .await,
    );
    let coffee = created(
        acme.post(
            "/v1/memories",
            json!({ "content": "The user drinks black coffee every morning.", "user_id": "alice" }),
        )
        .await,
    );
    created(
        acme.post(
            "/v1/memories",
            json!({ "content": "The user's timezone is Asia/Kolkata.", "user_id": "alice",
            "kind": "profile", "key": "timezone" }),
        )
        .await,
    );
    created(
        acme.post(
            "/v1/memories",
            json!({ "content": "The user is training for the Lisbon marathon.", "user_id": "bob",
            "observed_at": "2025-03-01T10:00:00.123456Z" }),
        )
        .await,
    );
    created(
        globex
            .post(
                "/v1/memories",
                json!({ "content": "The user lives in Oslo.", "user_id": "alice" }),
            )
            .await,
    );
    // An agent with settings, and a fact written through its key into its pool.
    let (st, b) = acme
        .req(
            "PUT",
            "/v1/agents/support",
            Some(
                json!({ "memory_enabled": true, "dedup_threshold": 0.87, "cluster_id": "helpdesk",
                "settings": { "extraction": { "mode": "batched", "min_turns": 4 }, "note": "front desk" } }),
            ),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{b}");
    created(
        s.with_key(&k.support)
            .post(
                "/v1/memories",
                json!({ "content": "The user prefers e-mail over phone calls.", "user_id": "alice" }),
            )
            .await,
    );
    // History: an edit (supersedes), a restatement (confirms), a forget, ratings.
    let (st, edited) = acme
        .req(
            "PATCH",
            &format!("/v1/memories/{home}"),
            Some(json!({ "content": "The user lives in Mysuru." })),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{edited}");
    let moved = edited["id"].as_str().unwrap().to_string();
    let (st, b) = acme
        .post(
            "/v1/memories",
            json!({ "content": "the user's daughter Maya plays the violin", "user_id": "alice" }),
        )
        .await;
    assert_eq!((st, b["decision"].as_str()), (StatusCode::OK, Some("NONE")), "{b}");
    assert_eq!(acme.req("DELETE", &format!("/v1/memories/{coffee}"), None).await.0, StatusCode::OK);
    assert_eq!(
        acme.post(&format!("/v1/memories/{violin}/rating"), json!({ "value": 1 })).await.0,
        StatusCode::OK
    );
    // A recalled turn (for the rating cascade), a conversation, a context session.
    let (_, r) = acme
        .post(
            "/v1/search",
            json!({ "query": "what instrument does her daughter play", "user_id": "alice", "limit": 1, "turn_id": "t-1" }),
        )
        .await;
    assert_eq!(r["results"][0]["memory"]["id"], violin.as_str(), "{r}");
    let (st, b) = acme
        .post("/v1/conversations/c1/messages", json!({ "user_id": "alice", "agent_id": "support", "messages": [
            { "role": "user", "content": "What should I get Maya for her birthday?" },
            { "role": "assistant", "content": "Perhaps new violin strings.", "turn_id": "t-1" },
            { "role": "assistant", "content": "", "tool_name": "shop", "tool_args": { "q": "violin strings" }, "metadata": { "n": 1.5 } }
        ] }))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{b}");
    let reply = b["messages"][1]["id"].as_str().unwrap().to_string();
    let (st, b) =
        acme.post("/v1/context", json!({ "user_id": "alice", "session_id": "s-1" })).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    (moved, violin, reply)
}

/// What a user sees of the store, without changing it (no search: that bumps counters).
pub(crate) async fn snapshot(acme: &Client, globex: &Client) -> Value {
    let mut out = serde_json::Map::new();
    for (name, c, path) in [
        ("acme alice", acme, "/v1/users/alice/export"),
        ("acme bob", acme, "/v1/users/bob/export"),
        ("globex alice", globex, "/v1/users/alice/export"),
        ("agent", acme, "/v1/agents/support"),
        ("conversation", acme, "/v1/conversations/c1/messages"),
    ] {
        let (st, b) = c.get(path).await;
        assert_eq!(st, StatusCode::OK, "{name}: {b}");
        out.insert(name.into(), b);
    }
    Value::Object(out)
}

#[tokio::test]
async fn migrate_moves_a_whole_sqlite_store_to_postgres() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::migrate_moves_a_whole_sqlite_store_to_postgres"
    ));
    let old = Db::new(Backend::Sqlite).await;
    let k = Keys {
        acme: key(&old, &["--tenant", "acme", "--role", "admin"]),
        globex: key(&old, &["--tenant", "globex", "--role", "admin"]),
        support: key(&old, &["--tenant", "acme", "--role", "agent", "--agent", "support"]),
        alice: key(&old, &["--tenant", "acme", "--role", "user", "--user", "alice"]),
    };
    let (moved, violin, reply) = {
        let s = old.serve(&[]);
        build(&s, &k).await
    };
    // A summary of the DAG and its source link (as the compactor writes them; no LLM here).
    let file = old.dir().join("crafted.jsonl");
    std::fs::write(&file, crate::backup::crafted(&reply)).unwrap();
    let (ok, _, err) = old.cli(&["import", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    let before = {
        let s = old.serve(&[]);
        snapshot(&s.with_key(&k.acme), &s.with_key(&k.globex)).await
    };
    let (ok, cli_before, err) = old.cli(&["export", "--tenant", "acme"]);
    assert!(ok, "{err}");

    // The move.
    let target = Db::new(Backend::Postgres).await;
    let url = target.url().unwrap().to_string();
    let from = old.dir().to_str().unwrap();
    let (ok, out, err) = migrate(&["--from", from, "--to", &url, "--json", "--batch", "3"]);
    assert!(ok, "migrate failed\nstdout: {out}\nstderr: {err}");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["verification"]["differences"], json!([]), "{report}");
    assert_eq!(report["verification"]["tenants"], 2, "{report}");
    assert!(err.contains("migrate: memories"), "progress on stderr: {err}");
    let tables = report["tables"].as_object().unwrap();
    for (t, n) in tables {
        assert_eq!(n["source"], n["target"], "{t}: {report}");
    }
    for (t, want) in [
        ("api_keys", 4),
        ("agents", 1),
        ("memories", 8),
        ("conversations", 1),
        ("messages", 3),
        ("recalls", 1),
        ("context_sessions", 1),
        ("summaries", 1),
        ("summary_sources", 1),
    ] {
        assert_eq!(tables[t]["target"], want, "{t}: {report}");
    }
    assert!(tables["memory_events"]["target"].as_u64().unwrap() >= 12, "{report}");
    assert!(report["embedding_model"].as_str().unwrap().starts_with("local:"), "{report}");

    // Vectors were copied, not recomputed: the same f32 values, bit for bit, and model ids.
    let (sv, pv) = (sqlite_vectors(old.dir()).await, pg_vectors(&url).await);
    assert_eq!(sv.len(), 7, "every fact but the profile one has a vector");
    assert_eq!(sv, pv, "vectors differ after the move");

    // A server on PostgreSQL: what users see is what they saw.
    let new_dir = tempfile::tempdir().unwrap();
    let s = Server::start_on(new_dir.path(), &["--database-url", &url]);
    let (acme, globex) = (s.with_key(&k.acme), s.with_key(&k.globex));
    assert_eq!(snapshot(&acme, &globex).await, before, "exports differ after the move");
    let pg = Db::new(Backend::Sqlite).await; // only a scratch dir for the CLI
    let mut c = engram(pg.dir());
    let out =
        c.args(["--database-url", &url, "export", "--tenant", "acme"]).output_bounded().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The whole tenant, line for line — but for the work the server on PostgreSQL did since
    // it started (the messages' vectors, the job that made them).
    let settled = |export: &str| -> Vec<String> {
        let mut v: Vec<String> = export
            .lines()
            .map(|l| {
                let mut line: Value = serde_json::from_str(l).unwrap();
                let table = line["table"].as_str().map(str::to_string);
                let row = &mut line["row"];
                match table.as_deref() {
                    Some("messages") => {
                        row["embedding"] = Value::Null;
                        row["embedding_model"] = Value::Null;
                    }
                    Some("jobs") => {
                        for k in ["status", "attempts", "updated_at", "lease_until"] {
                            row[k] = Value::Null;
                        }
                    }
                    _ => {}
                }
                line.to_string()
            })
            .collect();
        v.sort();
        v
    };
    let after = String::from_utf8_lossy(&out.stdout);
    assert_eq!(settled(&after), settled(&cli_before), "`engram export` differs");

    // History intact.
    let (_, h) = acme.get(&format!("/v1/memories/{moved}/history")).await;
    let chain: Vec<&str> =
        h["chain"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(chain, ["The user lives in Bengaluru.", "The user lives in Mysuru."], "{h}");
    // Search by keyword and by paraphrase, on the copied vectors.
    assert_eq!(
        contents(
            &acme.post("/v1/search", json!({ "query": "violin", "user_id": "alice" })).await.1
        )[0],
        "The user's daughter Maya plays the violin."
    );
    let home = contents(
        &acme
            .post("/v1/search", json!({ "query": "which city is her home?", "user_id": "alice" }))
            .await
            .1,
    );
    assert_eq!(home[0], "The user lives in Mysuru.", "{home:?}");
    assert!(!home.iter().any(|c| c.contains("Bengaluru") || c.contains("coffee")), "{home:?}");
    // Keys authenticate with their roles; tenants stay apart.
    let alice = s.with_key(&k.alice);
    assert_eq!(alice.get("/v1/memories?user_id=alice").await.0, StatusCode::OK);
    assert_error(&alice.get("/v1/memories?user_id=bob").await, 403, "forbidden");
    let support = s.with_key(&k.support);
    let (_, seen) = support.get("/v1/memories?user_id=alice&limit=100").await;
    assert!(
        seen["memories"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["content"] == "The user prefers e-mail over phone calls."),
        "the agent key sees its pool: {seen}"
    );
    assert_error(
        &support.req("PUT", "/v1/agents/other", Some(json!({ "memory_enabled": false }))).await,
        403,
        "forbidden",
    );
    assert_error(&globex.get(&format!("/v1/memories/{violin}")).await, 404, "not_found");
    assert_eq!(
        contents(
            &globex
                .post(
                    "/v1/search",
                    json!({ "query": "where does the user live", "user_id": "alice" })
                )
                .await
                .1
        ),
        ["The user lives in Oslo."]
    );
    assert_error(&s.anon().get("/v1/memories?user_id=alice").await, 401, "unauthorized");
    // The turn recalled before the move still cascades a rating of its reply.
    let (st, rated) =
        acme.post(&format!("/v1/messages/{reply}/rating"), json!({ "value": -1 })).await;
    assert_eq!(st, StatusCode::OK, "{rated}");
    assert_eq!(rated["rated_memories"], json!([violin]), "{rated}");
    // New writes continue the old sequences: messages and events.
    let (_, b) = acme
        .post(
            "/v1/conversations/c1/messages",
            json!({ "user_id": "alice", "messages": [{ "role": "user", "content": "Thanks!" }] }),
        )
        .await;
    assert_eq!(b["messages"][0]["seq"], 4, "{b}");
    let (_, h) = acme.get(&format!("/v1/memories/{violin}/history")).await;
    let events: Vec<&str> =
        h["events"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["created", "confirmed", "rated", "rated"], "{h}");
}

#[tokio::test]
async fn migrate_refuses_a_target_with_data_bad_urls_missing_dirs_and_mixed_vectors() {
    let _w = crate::helpers::watchdog(concat!(
        module_path!(),
        "::migrate_refuses_a_target_with_data_bad_urls_missing_dirs_and_mixed_vectors"
    ));
    let old = Db::new(Backend::Sqlite).await;
    for f in ["The user keeps bees.", "The user grows basil on the windowsill."] {
        let (ok, _, err) = old.cli(&["remember", f, "--user", "u"]);
        assert!(ok, "{err}");
    }
    let from = old.dir().to_str().unwrap().to_string();

    // No such dir; a dir without a store (and nothing is created there).
    let missing = old.dir().join("nope");
    let (ok, _, err) =
        migrate(&["--from", missing.to_str().unwrap(), "--to", "postgres://x@127.0.0.1:1/x"]);
    assert!(!ok && err.contains("does not exist"), "{err}");
    assert!(!missing.exists());
    let empty = tempfile::tempdir().unwrap();
    let target = Db::new(Backend::Postgres).await;
    let url = target.url().unwrap().to_string();
    let (ok, _, err) = migrate(&["--from", empty.path().to_str().unwrap(), "--to", &url]);
    assert!(!ok && err.contains("holds no engram store"), "{err}");
    assert!(!empty.path().join("engram.db").exists());
    // Not a PostgreSQL URL; nothing listening.
    let (ok, _, err) = migrate(&["--from", &from, "--to", "mysql://root@localhost/engram"]);
    assert!(!ok && err.contains("PostgreSQL URL"), "{err}");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (ok, _, err) = migrate(&[
        "--from",
        &from,
        "--to",
        &format!("postgres://nobody:secret@127.0.0.1:{port}/x"),
    ]);
    assert!(!ok && err.contains("cannot connect"), "{err}");
    assert!(!err.contains("secret"), "the password is not printed: {err}");

    // A target that already holds data is refused and left as it was.
    let busy = Db::new(Backend::Postgres).await;
    let (ok, _, err) = busy.cli(&["remember", "The user sails on weekends.", "--user", "u"]);
    assert!(ok, "{err}");
    let (ok, _, err) = migrate(&["--from", &from, "--to", busy.url().unwrap()]);
    assert!(!ok && err.contains("already holds engram data"), "{err}");
    let (_, list, _) = busy.cli(&["list", "--json"]);
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["memories"].as_array().unwrap().len(), 1, "{list}");

    // A finished copy is not copied over again; an interrupted one is resumed with --resume.
    let (ok, out, err) = migrate(&["--from", &from, "--to", &url]);
    assert!(ok, "{out}\n{err}");
    let (ok, _, err) = migrate(&["--from", &from, "--to", &url]);
    assert!(!ok && err.contains("finished copy"), "{err}");
    {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
        // As if the copy had stopped after the keys: the mark says so, the rows are gone.
        for sql in [
            "UPDATE meta SET value = 'copying' WHERE key = 'migrate_state'",
            "DELETE FROM memory_events",
            "DELETE FROM memories",
        ] {
            sqlx::query(sql).execute(&mut c).await.unwrap();
        }
    }
    let (ok, _, err) = migrate(&["--from", &from, "--to", &url]);
    assert!(!ok && err.contains("--resume"), "{err}");
    let (ok, out, err) = migrate(&["--from", &from, "--to", &url, "--resume", "--json"]);
    assert!(ok, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (report["resumed"].as_bool(), report["verified"].as_bool()),
        (Some(true), Some(true)),
        "{report}"
    );
    assert_eq!(report["tables"]["memories"]["copied"], 2, "{report}");

    // A source with vectors of two models (a re-embed not finished) is refused.
    {
        let url = format!("sqlite://{}", old.dir().join("engram.db").display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query(
            "UPDATE memories SET embedding_model = 'another-model' WHERE content LIKE '%bees%'",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    }
    let fresh_db = Db::new(Backend::Postgres).await;
    let fresh = fresh_db.url().unwrap().to_string();
    let (ok, _, err) = migrate(&["--from", &from, "--to", &fresh]);
    assert!(!ok && err.contains("mixes embedding models") && err.contains("reembed"), "{err}");

    // A source written by a newer engram (a schema this binary does not know) is refused.
    let newer = Db::new(Backend::Sqlite).await;
    let (ok, _, err) = newer.cli(&["remember", "The user keeps bees.", "--user", "u"]);
    assert!(ok, "{err}");
    {
        let url = format!("sqlite://{}", newer.dir().join("engram.db").display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
    }
    let (ok, _, err) = migrate(&["--from", newer.dir().to_str().unwrap(), "--to", &fresh]);
    assert!(!ok && err.contains("version 999") && err.contains("upgrade engram"), "{err}");
}
