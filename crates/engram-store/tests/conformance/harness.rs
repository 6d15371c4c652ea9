//! Fresh stores for each test, and builders for the rows the tests write.
//!
//! SQLite: a new temp data dir. PostgreSQL: a new database named `engram_t_<pid>_<n>_<rand>`
//! created from `ENGRAM_TEST_DATABASE_URL` (its template1 has the `vector` extension when the
//! server comes from `scripts/pg.sh start`), dropped when the test passes (kept for
//! inspection when it fails). The variable is required: without it the PostgreSQL half of
//! the suite fails and says how to start a server.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use engram_core::model::{
    EventKind, Memory, MemoryEvent, MemoryId, Message, MessageId, MessageRole, Source, SourceKind,
    TenantId, UserId,
};
use engram_core::store::{NewMemory, Store};
use rand::{Rng, SeedableRng};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use time::OffsetDateTime;

/// Which implementation a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// One fresh store (and what it takes to open it again, as a second process would).
/// How long one conformance test may run (the slowest takes seconds): past it, [`watchdog`]
/// names the test and ends the run, so a hang (a lock never granted) fails CI with a name
/// instead of holding it to its time limit. `ENGRAM_TEST_LIMIT_SECS` changes it.
fn test_limit() -> std::time::Duration {
    #[allow(clippy::disallowed_methods)] // a knob of the test run, not of the product
    let secs = std::env::var("ENGRAM_TEST_LIMIT_SECS").ok().and_then(|s| s.parse().ok());
    std::time::Duration::from_secs(secs.unwrap_or(10 * 60))
}

/// Held by a test while it runs; see [`test_limit`].
pub struct Watchdog(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

/// Start the [`Watchdog`] of the test `name`.
pub fn watchdog(name: &'static str) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let limit = test_limit();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            // Straight to the descriptor: the harness captures eprintln! of test threads.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "test {name} is still running after {} s: a hang; stopping the run",
                limit.as_secs()
            );
            std::process::exit(101);
        }
    });
    Watchdog(tx)
}

pub struct Fixture {
    pub backend: Backend,
    pub store: Arc<dyn Store>,
    /// SQLite: the data dir.
    pub dir: Option<tempfile::TempDir>,
    /// PostgreSQL: the admin URL and the test database's name and URL.
    pg: Option<PgDb>,
    pg_stores: Vec<Arc<engram_store::postgres::PgStore>>,
}

struct PgDb {
    admin: PgConnectOptions,
    name: String,
    url: String,
}

/// The admin URL of the test PostgreSQL server.
pub fn database_url() -> String {
    #[allow(
        clippy::disallowed_methods,
        reason = "tests read their database from the environment; the binary reads settings through clap"
    )]
    let url = std::env::var("ENGRAM_TEST_DATABASE_URL");
    match url {
        Ok(u) if !u.trim().is_empty() => u,
        _ => panic!(
            "ENGRAM_TEST_DATABASE_URL is not set: the PostgreSQL half of the store conformance suite \
             needs a PostgreSQL server with pgvector. Start one with\n\
             \n    export ENGRAM_TEST_DATABASE_URL=\"$(scripts/pg.sh start | tail -n 1)\"\n\
             \nand stop it afterwards with `scripts/pg.sh stop \"$ENGRAM_TEST_DATABASE_URL\"`."
        ),
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Fixture {
    pub async fn new(backend: Backend) -> Fixture {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let store = engram_store::open_sqlite(dir.path()).await.expect("open sqlite");
                Fixture { backend, store, dir: Some(dir), pg: None, pg_stores: vec![] }
            }
            Backend::Postgres => {
                let admin_url = database_url();
                let admin = PgConnectOptions::from_str(&admin_url)
                    .unwrap_or_else(|e| panic!("ENGRAM_TEST_DATABASE_URL is not a valid URL: {e}"));
                let name = format!(
                    "engram_t_{}_{}_{:08x}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::Relaxed),
                    rand::rng().random::<u32>()
                );
                let mut conn = PgConnection::connect_with(&admin).await.unwrap_or_else(|e| {
                    panic!("cannot connect to ENGRAM_TEST_DATABASE_URL ({admin_url}): {e}")
                });
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                conn.close().await.ok();
                let url = with_database(&admin_url, &name);
                let pg = engram_store::open_postgres(&url).await.expect("open postgres");
                // Message searches through the in-process cache, whatever the user's size, as
                // on SQLite (`pg_only` checks the switch from SQL at the default size).
                pg.set_transcript_cache_min_rows(0);
                let store: Arc<dyn Store> = pg.clone();
                Fixture {
                    backend,
                    store,
                    dir: None,
                    pg: Some(PgDb { admin, name, url }),
                    pg_stores: vec![pg],
                }
            }
        }
    }

    /// The same data opened again, as a second process would.
    pub async fn reopen(&mut self) -> Arc<dyn Store> {
        match self.backend {
            Backend::Sqlite => {
                let dir = self.dir.as_ref().map(|d| d.path().to_path_buf()).expect("data dir");
                engram_store::open_sqlite(&dir).await.expect("reopen sqlite")
            }
            Backend::Postgres => {
                let url = self.pg.as_ref().map(|p| p.url.clone()).expect("database url");
                let pg = engram_store::open_postgres(&url).await.expect("reopen postgres");
                pg.set_transcript_cache_min_rows(0);
                self.pg_stores.push(pg.clone());
                pg
            }
        }
    }

    /// The PostgreSQL store itself (PostgreSQL-only tests).
    pub fn pg(&self) -> Arc<engram_store::postgres::PgStore> {
        self.pg_stores.first().cloned().expect("a PostgreSQL fixture")
    }

    /// The PostgreSQL store last opened (by [`Fixture::reopen`], or the first).
    pub fn pg_last(&self) -> Arc<engram_store::postgres::PgStore> {
        self.pg_stores.last().cloned().expect("a PostgreSQL fixture")
    }

    /// The URL of this fixture's PostgreSQL database.
    pub fn pg_url(&self) -> String {
        self.pg.as_ref().map(|p| p.url.clone()).expect("a PostgreSQL fixture")
    }

    /// Drop the test database (called after the test body passed).
    pub async fn finish(self) {
        for s in &self.pg_stores {
            s.pool().close().await;
        }
        if let Some(pg) = self.pg
            && let Ok(mut conn) = PgConnection::connect_with(&pg.admin).await
        {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                pg.name
            )))
            .execute(&mut conn)
            .await;
            conn.close().await.ok();
        }
    }
}

/// `url` with its database replaced by `db` (keeps host, port, user and query).
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[scheme_end..].find('/').map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{db}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

// ---- builders ----

pub fn tenant(s: &str) -> TenantId {
    TenantId::parse(s).expect("tenant id")
}

pub fn user(s: &str) -> UserId {
    UserId::parse(s).expect("user id")
}

/// Now, at microsecond precision: what both stores keep (the store contract), so rows
/// compare equal after a round trip.
pub fn now() -> OffsetDateTime {
    let t = OffsetDateTime::now_utc();
    t.replace_nanosecond(t.nanosecond() / 1000 * 1000).expect("valid time")
}

/// A knowledge memory of `user` in `tenant`.
pub fn memory(t: &TenantId, u: &UserId, content: &str) -> Memory {
    let source = Source { kind: SourceKind::Manual, conversation_id: None, message_ids: vec![] };
    Memory::new(t.clone(), u.clone(), content.to_string(), source, now())
}

pub fn event(id: MemoryId, kind: EventKind, related: Option<MemoryId>) -> MemoryEvent {
    MemoryEvent {
        memory_id: id,
        event: kind,
        related_id: related,
        actor: "test".into(),
        detail: serde_json::json!({"by": "conformance"}),
        at: now(),
    }
}

/// A row to insert, with its `created` event and an optional vector.
pub fn new_row(m: Memory, vector: Option<Vec<f32>>) -> NewMemory {
    let events = vec![event(m.id, EventKind::Created, None)];
    let mut m = m;
    if vector.is_some() && m.embedding_model.is_none() {
        m.embedding_model = Some(MODEL.into());
    }
    NewMemory { memory: m, vector, events, unique: false }
}

/// The embedding model id the tests record.
pub const MODEL: &str = "test-model";

/// A random unit vector (deterministic per seed).
pub fn unit(dims: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let v: Vec<f32> = (0..dims).map(|_| rng.random::<f32>() - 0.5).collect();
    normalize(v)
}

pub fn normalize(v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n == 0.0 { v } else { v.into_iter().map(|x| x / n).collect() }
}

pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A message of a conversation.
pub fn message(t: &TenantId, u: &UserId, conv: &str, role: MessageRole, content: &str) -> Message {
    Message {
        id: MessageId::new(),
        tenant_id: t.clone(),
        conversation_id: engram_core::model::ConversationId::parse(conv).expect("conversation id"),
        user_id: u.clone(),
        agent_id: None,
        seq: 0,
        role,
        content: content.to_string(),
        tool_name: None,
        tool_args: None,
        tool_result: None,
        turn_id: None,
        metadata: serde_json::json!({}),
        created_at: now(),
        rating: 0,
        access_count: 0,
        last_accessed_at: None,
    }
}
