//! The per-user change counter (`user_versions`): every write to a user's memories bumps
//! it inside its transaction, and in-process vector caches (SQLite) catch up with the rows
//! whose `version` is newer. Shared by the stores and by restore.

use engram_core::error::Result;
use sqlx::{Postgres, Row, Sqlite, Transaction};

/// Bump a user's change counter inside a write transaction; returns the new version.
pub(crate) async fn bump_sqlite(
    tx: &mut Transaction<'static, Sqlite>,
    tenant: &str,
    user: &str,
) -> Result<i64> {
    let v: i64 = sqlx::query(
        "INSERT INTO user_versions (tenant_id, user_id, version, incarnation) VALUES (?, ?, 1, random()) \
         ON CONFLICT (tenant_id, user_id) DO UPDATE SET version = version + 1 RETURNING version",
    )
    .bind(tenant)
    .bind(user)
    .fetch_one(&mut **tx)
    .await
    .map_err(crate::fault::sqlite)?
    .get(0);
    Ok(v)
}

/// Bump a user's change counter inside a write transaction (locking the user's row until
/// commit); returns the new version.
pub(crate) async fn bump_postgres(
    tx: &mut Transaction<'static, Postgres>,
    tenant: &str,
    user: &str,
) -> Result<i64> {
    let r = sqlx::query(
        "INSERT INTO user_versions (tenant_id, user_id, version) VALUES ($1, $2, 1) \
         ON CONFLICT (tenant_id, user_id) DO UPDATE SET version = user_versions.version + 1 \
         RETURNING version",
    )
    .bind(tenant)
    .bind(user)
    .fetch_one(&mut **tx)
    .await
    .map_err(crate::fault::postgres)?;
    r.try_get("version").map_err(crate::fault::postgres)
}
