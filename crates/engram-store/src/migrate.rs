//! A minimal migration runner: numbered SQL scripts embedded in the binary, applied in order
//! inside one transaction each, recorded in `schema_migrations`. A database whose version is
//! higher than the newest script this binary knows is refused (an older binary must not write
//! to a newer schema).

use engram_core::{Error, Result};
use sqlx::{Row, SqlitePool};

/// The SQLite migrations, in order. Never edit an applied one: append a new entry.
pub const SQLITE: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/sqlite/0001_init.sql")),
    (2, "fts_vocab", include_str!("../migrations/sqlite/0002_fts_vocab.sql")),
    (3, "jobs_locks_summary", include_str!("../migrations/sqlite/0003_jobs_locks_summary.sql")),
];

/// Apply pending migrations; returns the schema version.
pub async fn run_sqlite(pool: &SqlitePool) -> Result<i64> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)",
    )
    .execute(pool)
    .await
    .map_err(crate::sqlite::db)?;
    let current: i64 = sqlx::query("SELECT coalesce(max(version), 0) AS v FROM schema_migrations")
        .fetch_one(pool)
        .await
        .map_err(crate::sqlite::db)?
        .get("v");
    let newest = SQLITE.last().map_or(0, |m| m.0);
    if current > newest {
        return Err(Error::Unprocessable(format!(
            "the database schema is version {current} but this engram knows only up to {newest}; \
             upgrade engram"
        )));
    }
    for (version, name, sql) in SQLITE.iter().filter(|m| m.0 > current) {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(crate::sqlite::db)?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *tx)
            .await
            .map_err(|e| Error::internal(format!("migration {version} ({name}) failed: {e}")))?;
        sqlx::query("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)")
            .bind(version)
            .bind(name)
            .bind(crate::sqlite::ts(time::OffsetDateTime::now_utc()))
            .execute(&mut *tx)
            .await
            .map_err(crate::sqlite::db)?;
        tx.commit().await.map_err(crate::sqlite::db)?;
        tracing::info!(version, name, "applied migration");
    }
    Ok(newest)
}
