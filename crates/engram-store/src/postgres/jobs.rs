//! The durable job queue on PostgreSQL, shared by every worker process.
//!
//! Same rules as the SQLite store (the conformance suite checks both; all but the claim are
//! written once for both, in `crate::common::jobs`; this file holds the claim):
//!
//! - **Dedup.** At most one *pending* job per `(tenant, dedup_key)`: a partial unique index,
//!   and `INSERT … ON CONFLICT DO NOTHING` reports a duplicate as `false`.
//! - **Claim.** The oldest runnable job (`run_after`, then id) of any tenant: pending and due,
//!   or running with an expired lease. One statement, `UPDATE … WHERE (tenant_id, id) =
//!   (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING *`, so concurrent workers never
//!   wait on each other and never get the same job.
//! - **Lock keys.** At most one running (unexpired) job per `(tenant, lock_key)`. The claim's
//!   `NOT EXISTS` sees only committed claims, so two workers could pick two jobs of one key at
//!   the same instant; a claimed job with a lock key is therefore kept only after taking a
//!   transaction-level advisory lock on the key and re-checking in a fresh snapshot (READ
//!   COMMITTED takes one per statement). Claims of one key serialize on that lock, and the
//!   later one sees the earlier one's commit: it rolls back and tries the next job.
//! - **Retry.** `fail_job` with a retry time puts the job back to pending; if another pending
//!   job took the dedup key meanwhile, that one covers the same data and this one is closed
//!   as done (a savepoint catches the unique violation).

use engram_core::error::Result;
use engram_core::model::{Job, JobKind};
use sqlx::PgPool;
use sqlx::postgres::PgRow;
use time::OffsetDateTime;

use super::db;
use super::rows::{self, col};

/// Claims that lose a lock-key race are retried with the next job this many times.
const CLAIM_ATTEMPTS: usize = 8;

/// Claim the oldest runnable job of `kinds` (see above).
pub(super) async fn claim(
    pool: &PgPool,
    now: OffsetDateTime,
    lease_until: OffsetDateTime,
    kinds: &[JobKind],
) -> Result<Option<Job>> {
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    for _ in 0..CLAIM_ATTEMPTS {
        let mut tx = pool.begin().await.map_err(db)?;
        let row: Option<PgRow> = sqlx::query(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = $1, updated_at = $2 \
             WHERE (tenant_id, id) = (SELECT j.tenant_id, j.id FROM jobs j \
               WHERE ((j.status = 'pending' AND j.run_after <= $2) OR (j.status = 'running' AND j.lease_until <= $2)) \
                 AND j.kind = ANY($3) \
                 AND (j.lock_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs r WHERE r.tenant_id = j.tenant_id \
                      AND r.lock_key = j.lock_key AND r.status = 'running' AND r.lease_until > $2 AND r.id <> j.id)) \
               ORDER BY j.run_after, j.id COLLATE \"C\" LIMIT 1 FOR UPDATE SKIP LOCKED) \
             RETURNING *",
        )
        .bind(lease_until)
        .bind(now)
        .bind(&kinds)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        let Some(row) = row else {
            tx.commit().await.map_err(db)?;
            return Ok(None);
        };
        let job = rows::job(&row)?;
        if let Some(key) = &job.lock_key {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1 || chr(31) || $2, 7))")
                .bind(job.tenant_id.as_str())
                .bind(key)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            let r = sqlx::query(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE tenant_id = $1 AND lock_key = $2 AND status = 'running' \
                 AND lease_until > $3 AND id <> $4) AS held",
            )
            .bind(job.tenant_id.as_str())
            .bind(key)
            .bind(now)
            .bind(&job.id)
            .fetch_one(&mut *tx)
            .await
            .map_err(db)?;
            if col::<bool>(&r, "held")? {
                tx.rollback().await.map_err(db)?;
                continue;
            }
        }
        tx.commit().await.map_err(db)?;
        return Ok(Some(job));
    }
    Ok(None)
}
