//! A minimal migration runner: numbered SQL scripts embedded in the binary, applied in order
//! inside one transaction each, recorded in `schema_migrations`. A database whose version is
//! higher than the newest script this binary knows is refused (an older binary must not write
//! to a newer schema).
//!
//! PostgreSQL ([`run_postgres`]): all pending scripts run in ONE transaction (PostgreSQL has
//! transactional DDL) that first takes a transaction-level advisory lock, so several
//! processes starting at once apply each script exactly once; the others wait, then see the
//! new version.

use engram_core::{Error, Result};
use sqlx::{PgPool, Row, SqlitePool};

/// The SQLite migrations, in order. Never edit an applied one: append a new entry.
pub const SQLITE: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/sqlite/0001_init.sql")),
    (2, "fts_vocab", include_str!("../migrations/sqlite/0002_fts_vocab.sql")),
    (3, "jobs_locks_summary", include_str!("../migrations/sqlite/0003_jobs_locks_summary.sql")),
    (4, "user_incarnation", include_str!("../migrations/sqlite/0004_user_incarnation.sql")),
    (5, "ids_per_tenant", include_str!("../migrations/sqlite/0005_ids_per_tenant.sql")),
    (6, "summary_dag", include_str!("../migrations/sqlite/0006_summary_dag.sql")),
    (7, "transcript_access", include_str!("../migrations/sqlite/0007_transcript_access.sql")),
    (8, "session_state", include_str!("../migrations/sqlite/0008_session_state.sql")),
    (9, "speakers", include_str!("../migrations/sqlite/0009_speakers.sql")),
    (
        10,
        "transcript_vector_seq",
        include_str!("../migrations/sqlite/0010_transcript_vector_seq.sql"),
    ),
    (11, "message_context", include_str!("../migrations/sqlite/0011_message_context.sql")),
    (12, "keyword_scopes", include_str!("../migrations/sqlite/0012_keyword_scopes.sql")),
    (13, "unembedded_messages", include_str!("../migrations/sqlite/0013_unembedded_messages.sql")),
    (14, "job_counts", include_str!("../migrations/sqlite/0014_job_counts.sql")),
    (15, "finished_jobs", include_str!("../migrations/sqlite/0015_finished_jobs.sql")),
    (16, "message_dates", include_str!("../migrations/sqlite/0016_message_dates.sql")),
    (17, "active_content", include_str!("../migrations/sqlite/0017_active_content.sql")),
    (18, "context_params", include_str!("../migrations/sqlite/0018_context_params.sql")),
    (19, "unspaced_words", include_str!("../migrations/sqlite/0019_unspaced_words.sql")),
    (20, "ui_sessions", include_str!("../migrations/sqlite/0020_ui_sessions.sql")),
];

/// The PostgreSQL migrations, in order. Never edit an applied one: append a new entry.
pub const POSTGRES: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/postgres/0001_init.sql")),
    (2, "inline_vectors", include_str!("../migrations/postgres/0002_inline_vectors.sql")),
    (3, "user_scoped_fts", include_str!("../migrations/postgres/0003_user_scoped_fts.sql")),
    (4, "scoped_lexemes", include_str!("../migrations/postgres/0004_scoped_lexemes.sql")),
    (5, "vector_covering", include_str!("../migrations/postgres/0005_vector_covering.sql")),
    (6, "summary_dag", include_str!("../migrations/postgres/0006_summary_dag.sql")),
    (7, "transcript_access", include_str!("../migrations/postgres/0007_transcript_access.sql")),
    (8, "session_state", include_str!("../migrations/postgres/0008_session_state.sql")),
    (9, "speakers", include_str!("../migrations/postgres/0009_speakers.sql")),
    (10, "message_context", include_str!("../migrations/postgres/0010_message_context.sql")),
    (11, "transcript_stats", include_str!("../migrations/postgres/0011_transcript_stats.sql")),
    (
        12,
        "transcript_vector_xid",
        include_str!("../migrations/postgres/0012_transcript_vector_xid.sql"),
    ),
    (
        13,
        "unembedded_messages",
        include_str!("../migrations/postgres/0013_unembedded_messages.sql"),
    ),
    (14, "job_counts", include_str!("../migrations/postgres/0014_job_counts.sql")),
    (15, "finished_jobs", include_str!("../migrations/postgres/0015_finished_jobs.sql")),
    (
        16,
        "context_next_by_key",
        include_str!("../migrations/postgres/0016_context_next_by_key.sql"),
    ),
    (17, "message_dates", include_str!("../migrations/postgres/0017_message_dates.sql")),
    (18, "active_content", include_str!("../migrations/postgres/0018_active_content.sql")),
    (19, "context_params", include_str!("../migrations/postgres/0019_context_params.sql")),
    (20, "unspaced_words", include_str!("../migrations/postgres/0020_unspaced_words.sql")),
    (21, "ui_sessions", include_str!("../migrations/postgres/0021_ui_sessions.sql")),
];

/// The advisory lock key taken while migrating a PostgreSQL database ("engram" + 1).
pub const PG_MIGRATION_LOCK: i64 = 0x656e_6772_616d_0001;

/// The newest version `migrations` reach; a database already at a newer `current` one is
/// refused (an older binary must not write to a newer schema).
fn newest_known(migrations: &[(i64, &str, &str)], current: i64) -> Result<i64> {
    let newest = migrations.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(Error::Unprocessable(format!(
            "the database schema is version {current} but this engram knows only up to {newest}; \
             upgrade engram"
        )));
    }
    Ok(newest)
}

/// A migration script that did not run.
fn failed(version: i64, name: &str, e: sqlx::Error) -> Error {
    Error::internal(format!("migration {version} ({name}) failed: {e}"))
}

/// Apply pending migrations; returns the schema version.
pub async fn run_sqlite(pool: &SqlitePool) -> Result<i64> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )
    .execute(pool)
    .await
    .map_err(crate::fault::sqlite)?;
    let current: i64 = sqlx::query("SELECT coalesce(max(version), 0) AS v FROM schema_migrations")
        .fetch_one(pool)
        .await
        .map_err(crate::fault::sqlite)?
        .get("v");
    let newest = newest_known(SQLITE, current)?;
    for (version, name, sql) in SQLITE.iter().filter(|m| m.0 > current) {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(crate::fault::sqlite)?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *tx)
            .await
            .map_err(|e| failed(*version, name, e))?;
        after_sqlite(*version, &mut tx).await.map_err(|e| failed(*version, name, e))?;
        sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)")
            .bind(version)
            .bind(name)
            .bind(
                i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000 * 1000)
                    .unwrap_or(i64::MAX),
            )
            .execute(&mut *tx)
            .await
            .map_err(crate::fault::sqlite)?;
        tx.commit().await.map_err(crate::fault::sqlite)?;
        tracing::info!(version, name, "applied migration");
    }
    Ok(newest)
}

/// Apply pending PostgreSQL migrations under an advisory lock; returns the schema version.
pub async fn run_postgres(pool: &PgPool) -> Result<i64> {
    use crate::fault::postgres as db;
    let mut tx = pool.begin().await.map_err(db)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(PG_MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)",
    )
    .execute(&mut *tx)
    .await
    .map_err(db)?;
    let current: i64 = sqlx::query("SELECT coalesce(max(version), 0) AS v FROM schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?
        .try_get("v")
        .map_err(db)?;
    let newest = newest_known(POSTGRES, current)?;
    for (version, name, sql) in POSTGRES.iter().filter(|m| m.0 > current) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *tx)
            .await
            .map_err(|e| failed(*version, name, e))?;
        after_postgres(*version, &mut tx).await.map_err(|e| failed(*version, name, e))?;
        sqlx::query(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, now())",
        )
        .bind(version)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tracing::info!(version, name, "applied migration");
    }
    tx.commit().await.map_err(db)?;
    Ok(newest)
}

/// The tables whose rows are keyword-indexed.
const INDEXED: [&str; 3] = ["memories", "messages", "summaries"];

/// What a SQLite migration derives in Rust, in its transaction right after its script:
/// migration 19's `keyword_text` of the rows already stored whose text has characters
/// written without spaces (non-ASCII rows are read, in pages; the update triggers
/// re-index them).
async fn after_sqlite(
    version: i64,
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
) -> sqlx::Result<()> {
    if version != 19 {
        return Ok(());
    }
    for table in INDEXED {
        let select = format!(
            "SELECT rowid AS r, content FROM {table} \
             WHERE rowid > ? AND length(content) <> length(CAST(content AS BLOB)) \
             ORDER BY rowid LIMIT 500"
        );
        let update = format!("UPDATE {table} SET keyword_text = ? WHERE rowid = ?");
        let mut after = i64::MIN;
        loop {
            let rows = sqlx::query(sqlx::AssertSqlSafe(select.clone()))
                .bind(after)
                .fetch_all(&mut **tx)
                .await?;
            let Some(last) = rows.last() else { break };
            after = last.try_get("r")?;
            for r in &rows {
                let content: String = r.try_get("content")?;
                if let Some(words) = crate::text::keyword_text(&content) {
                    sqlx::query(sqlx::AssertSqlSafe(update.clone()))
                        .bind(words)
                        .bind(r.try_get::<i64, _>("r")?)
                        .execute(&mut **tx)
                        .await?;
                }
            }
        }
    }
    Ok(())
}

/// What a PostgreSQL migration derives in Rust, in its transaction right after its script:
/// migration 20's `fts_text` of the rows already stored whose text has characters written
/// without spaces (non-ASCII rows are read, in pages; triggers keep the context and the
/// statistics).
async fn after_postgres(
    version: i64,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
) -> sqlx::Result<()> {
    if version != 20 {
        return Ok(());
    }
    for table in INDEXED {
        let tool = if table == "messages" { "coalesce(tool_name, '')" } else { "''" };
        let select = format!(
            "SELECT tenant_id, id::text AS id, content, {tool} AS tool FROM {table} \
             WHERE (tenant_id, id) > ($1, $2::uuid) AND octet_length(content) <> length(content) \
             ORDER BY tenant_id, id LIMIT 500"
        );
        let len = if table == "memories" {
            ", fts_len = length(to_tsvector('simple'::regconfig, v.t))"
        } else {
            ""
        };
        let update = format!(
            "UPDATE {table} m SET fts_text = v.t{len} \
             FROM unnest($1::text[], $2::text[], $3::text[]) AS v(tenant_id, id, t) \
             WHERE m.tenant_id = v.tenant_id AND m.id = v.id::uuid"
        );
        let mut after = (String::new(), uuid::Uuid::nil().to_string());
        loop {
            let rows = sqlx::query(sqlx::AssertSqlSafe(select.clone()))
                .bind(&after.0)
                .bind(&after.1)
                .fetch_all(&mut **tx)
                .await?;
            let Some(last) = rows.last() else { break };
            after = (last.try_get("tenant_id")?, last.try_get("id")?);
            let (mut tenants, mut ids, mut texts) = (Vec::new(), Vec::new(), Vec::new());
            for r in &rows {
                let content: String = r.try_get("content")?;
                if content.chars().any(crate::text::is_wide) {
                    let tool: String = r.try_get("tool")?;
                    tenants.push(r.try_get::<String, _>("tenant_id")?);
                    ids.push(r.try_get::<String, _>("id")?);
                    texts.push(crate::text::index_text(&[&content, &tool]));
                }
            }
            if !ids.is_empty() {
                sqlx::query(sqlx::AssertSqlSafe(update.clone()))
                    .bind(tenants)
                    .bind(ids)
                    .bind(texts)
                    .execute(&mut **tx)
                    .await?;
            }
        }
    }
    Ok(())
}
