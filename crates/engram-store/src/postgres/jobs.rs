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

/// Claim up to `limit` runnable jobs of `kinds` in one transaction (the embedding lane's
/// group): the candidates are locked `FOR UPDATE SKIP LOCKED` in one statement, at most one
/// per lock key is kept, the advisory locks of their keys are taken in one statement (in hash
/// order, so two groups never wait on each other in a circle), the keys are re-checked in a
/// fresh snapshot as in [`claim`], and the kept jobs are marked running in one update. Six
/// round trips for the group, where one claim after another takes about five per job.
pub(super) async fn claim_many(
    pool: &PgPool,
    now: OffsetDateTime,
    lease_until: OffsetDateTime,
    kinds: &[JobKind],
    limit: usize,
) -> Result<Vec<Job>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    let mut tx = pool.begin().await.map_err(db)?;
    let rows: Vec<PgRow> = sqlx::query(
        "SELECT j.* FROM jobs j \
         WHERE ((j.status = 'pending' AND j.run_after <= $1) OR (j.status = 'running' AND j.lease_until <= $1)) \
           AND j.kind = ANY($2) \
           AND (j.lock_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs r WHERE r.tenant_id = j.tenant_id \
                AND r.lock_key = j.lock_key AND r.status = 'running' AND r.lease_until > $1 AND r.id <> j.id)) \
         ORDER BY j.run_after, j.id COLLATE \"C\" LIMIT $3 FOR UPDATE SKIP LOCKED",
    )
    .bind(now)
    .bind(&kinds)
    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?;
    let mut candidates = Vec::with_capacity(rows.len());
    let mut keys = std::collections::HashSet::new();
    for row in &rows {
        let job = rows::job(row)?;
        // Two runnable jobs of one key (a pending one and an expired one): the older only.
        let first = match &job.lock_key {
            Some(key) => keys.insert((job.tenant_id.as_str().to_owned(), key.clone())),
            None => true,
        };
        if first {
            candidates.push(job);
        }
    }
    let keyed: Vec<&Job> = candidates.iter().filter(|j| j.lock_key.is_some()).collect();
    let mut held = std::collections::HashSet::new();
    if !keyed.is_empty() {
        let tenants: Vec<&str> = keyed.iter().map(|j| j.tenant_id.as_str()).collect();
        let locks: Vec<&str> = keyed.iter().filter_map(|j| j.lock_key.as_deref()).collect();
        let ids: Vec<&str> = keyed.iter().map(|j| j.id.as_str()).collect();
        sqlx::query(
            "SELECT pg_advisory_xact_lock(h) FROM (SELECT hashtextextended(t || chr(31) || k, 7) AS h \
             FROM unnest($1::text[], $2::text[]) AS u(t, k)) l ORDER BY h",
        )
        .bind(&tenants)
        .bind(&locks)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        let taken: Vec<PgRow> = sqlx::query(
            "SELECT DISTINCT u.i AS id FROM unnest($1::text[], $2::text[], $3::text[]) AS u(t, k, i) \
             JOIN jobs r ON r.tenant_id = u.t AND r.lock_key = u.k AND r.id <> u.i \
             WHERE r.status = 'running' AND r.lease_until > $4",
        )
        .bind(&tenants)
        .bind(&locks)
        .bind(&ids)
        .bind(now)
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        for r in &taken {
            held.insert(col::<String>(r, "id")?);
        }
    }
    candidates.retain(|j| !held.contains(&j.id));
    if candidates.is_empty() {
        tx.commit().await.map_err(db)?;
        return Ok(Vec::new());
    }
    let tenants: Vec<&str> = candidates.iter().map(|j| j.tenant_id.as_str()).collect();
    let ids: Vec<&str> = candidates.iter().map(|j| j.id.as_str()).collect();
    let claimed: Vec<PgRow> = sqlx::query(
        "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = $1, updated_at = $2 \
         WHERE (tenant_id, id) IN (SELECT * FROM unnest($3::text[], $4::text[])) RETURNING *",
    )
    .bind(lease_until)
    .bind(now)
    .bind(&tenants)
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await
    .map_err(db)?;
    tx.commit().await.map_err(db)?;
    let mut jobs = claimed.iter().map(rows::job).collect::<Result<Vec<_>>>()?;
    jobs.sort_by(|a, b| a.run_after.cmp(&b.run_after).then_with(|| a.id.cmp(&b.id)));
    Ok(jobs)
}
