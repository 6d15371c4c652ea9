//! The [`engram_core::store::JobStore`] methods whose statements and rules are the same on
//! both backends: enqueue (a duplicate pending job is not added), heartbeat, complete, fail
//! or requeue, list and retry. Claiming stays with each backend (PostgreSQL skips locked
//! rows and re-checks lock keys under an advisory lock; SQLite has one writer).

use engram_core::error::{Error, Result};
use engram_core::model::{Job, JobStatus, TenantId, UserId};
use time::OffsetDateTime;

use super::Arg::{Int, Json, OptText, Text, Ts};
use super::rows::{self, Columns};
use super::{Arg, Backend, limit};

/// Add a pending job; false when a pending job of the same tenant and dedup key exists.
pub(crate) async fn enqueue<B: Backend>(b: &B, job: &Job) -> Result<bool> {
    Ok(b.write(INSERT_JOB, &insert_args(job)).await? == 1)
}

/// [`enqueue`] inside a write transaction.
pub(crate) async fn enqueue_in<B: Backend>(tx: &mut B::Tx, job: &Job) -> Result<bool> {
    Ok(B::tx_run(tx, INSERT_JOB, &insert_args(job)).await.map_err(B::fault)? == 1)
}

/// A new pending job, unless one of its dedup key is pending ([`insert_args`]).
const INSERT_JOB: &str = "INSERT INTO jobs (tenant_id, id, user_id, kind, dedup_key, lock_key, \
     payload, status, attempts, max_attempts, run_after, created_at, updated_at) \
     VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?) ON CONFLICT DO NOTHING";

fn insert_args(job: &Job) -> [Arg<'_>; 11] {
    [
        Text(job.tenant_id.as_str()),
        Text(&job.id),
        OptText(job.user_id.as_ref().map(UserId::as_str)),
        Text(job.kind.as_str()),
        OptText(job.dedup_key.as_deref()),
        OptText(job.lock_key.as_deref()),
        Json(&job.payload),
        Int(job.max_attempts),
        Ts(job.run_after),
        Ts(job.created_at),
        Ts(job.updated_at),
    ]
}

/// Extend a running job's lease.
pub(crate) async fn heartbeat<B: Backend>(
    b: &B,
    id: &str,
    lease_until: OffsetDateTime,
) -> Result<()> {
    let sql = "UPDATE jobs SET lease_until = ? WHERE id = ? AND status = 'running'";
    b.write(sql, &[Ts(lease_until), Text(id)]).await?;
    Ok(())
}

pub(crate) async fn complete<B: Backend>(b: &B, id: &str) -> Result<()> {
    b.write(
        "UPDATE jobs SET status = 'done', lease_until = NULL, last_error = NULL, updated_at = ? \
         WHERE id = ?",
        &[Ts(OffsetDateTime::now_utc()), Text(id)],
    )
    .await?;
    Ok(())
}

/// Mark several jobs done in one transaction.
pub(crate) async fn complete_all<B: Backend>(b: &B, ids: &[String]) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let mut tx = b.begin_write().await?;
    for id in ids {
        B::tx_run(
            &mut tx,
            "UPDATE jobs SET status = 'done', lease_until = NULL, last_error = NULL, \
             updated_at = ? WHERE id = ?",
            &[Ts(now), Text(id)],
        )
        .await
        .map_err(B::fault)?;
    }
    B::commit(tx).await
}

/// Fail a job for good, or put it back to pending at `retry_at`; if another pending job took
/// the dedup key meanwhile, that one covers the same data and this one is closed as done.
pub(crate) async fn fail<B: Backend>(
    b: &B,
    id: &str,
    error: &str,
    retry_at: Option<OffsetDateTime>,
) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let mut tx = b.begin_write().await?;
    let closed = match retry_at {
        Some(at) => {
            let requeued = B::tx_attempt(
                &mut tx,
                "UPDATE jobs SET status = 'pending', run_after = ?, lease_until = NULL, \
                 last_error = ?, updated_at = ? WHERE id = ?",
                &[Ts(at), Text(error), Ts(now), Text(id)],
            )
            .await;
            match requeued {
                Ok(_) => None,
                Err(e) if B::is_duplicate(&e) => {
                    Some(("done", format!("superseded by a newer pending job after: {error}")))
                }
                Err(e) => return Err(B::fault(e)),
            }
        }
        None => Some(("failed", error.to_string())),
    };
    if let Some((status, error)) = closed {
        B::tx_run(
            &mut tx,
            "UPDATE jobs SET status = ?, lease_until = NULL, last_error = ?, updated_at = ? \
             WHERE id = ?",
            &[Text(status), Text(&error), Ts(now), Text(id)],
        )
        .await
        .map_err(B::fault)?;
    }
    B::commit(tx).await
}

/// The newest jobs first, of one tenant or all, of one status or all.
pub(crate) async fn list<B: Backend>(
    b: &B,
    tenant: Option<&TenantId>,
    status: Option<JobStatus>,
    n: usize,
) -> Result<Vec<Job>> {
    let sql = format!(
        "SELECT * FROM jobs WHERE (CAST(?1 AS TEXT) IS NULL OR tenant_id = ?1) \
         AND (CAST(?2 AS TEXT) IS NULL OR status = ?2) \
         ORDER BY created_at DESC, id{} DESC LIMIT {}",
        B::BYTE_ORDER,
        limit(n)
    );
    let args = [OptText(tenant.map(TenantId::as_str)), OptText(status.map(JobStatus::as_str))];
    let rows = b.read_all(&sql, &args).await?;
    rows.iter().map(rows::job).collect()
}

/// Put a failed job back to pending, due now, with its attempts reset.
pub(crate) async fn retry<B: Backend>(b: &B, tenant: Option<&TenantId>, id: &str) -> Result<()> {
    let mut tx = b.begin_write().await?;
    let retried = B::tx_run(
        &mut tx,
        "UPDATE jobs SET status = 'pending', attempts = 0, run_after = ?1, last_error = NULL, \
         updated_at = ?1 WHERE id = ?2 AND status = 'failed' \
         AND (CAST(?3 AS TEXT) IS NULL OR tenant_id = ?3)",
        // The application's clock, like the `now` that claims compare with.
        &[Ts(OffsetDateTime::now_utc()), Text(id), OptText(tenant.map(TenantId::as_str))],
    )
    .await;
    let n = match retried {
        Ok(n) => {
            B::commit(tx).await?;
            n
        }
        // Another pending job holds the dedup key: the failed job stays failed.
        Err(e) if B::is_duplicate(&e) => {
            return Err(Error::Conflict(format!(
                "job {id} stays failed: a pending job already does the same work"
            )));
        }
        Err(e) => return Err(B::fault(e)),
    };
    if n == 0 {
        // Say why: no such job, or one that is not failed.
        let row = b
            .read_opt(
                "SELECT status FROM jobs WHERE id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR tenant_id = ?2)",
                &[Text(id), OptText(tenant.map(TenantId::as_str))],
            )
            .await?;
        return Err(match row {
            Some(r) => Error::Conflict(format!(
                "job {id} is {}: only a failed job can be retried",
                r.text("status")?
            )),
            None => Error::not_found(format!("job {id}")),
        });
    }
    Ok(())
}

/// Delete up to `n` jobs that finished before `before`, oldest first (through the partial
/// index `jobs_done` of migration 15: only finished jobs are read). `done` is a job's last
/// status (nothing claims, retries or fails a finished job), so the ids chosen stay finished
/// until they are deleted.
pub(crate) async fn prune<B: Backend>(b: &B, before: OffsetDateTime, n: usize) -> Result<u64> {
    let sql = format!(
        "DELETE FROM jobs WHERE id IN (SELECT id FROM {} \
         WHERE status = 'done' AND updated_at < ?1 ORDER BY updated_at LIMIT {})",
        B::FINISHED_JOBS,
        limit(n)
    );
    b.write(&sql, &[Ts(before)]).await
}
