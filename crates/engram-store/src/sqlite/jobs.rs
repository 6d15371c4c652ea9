//! SQLite: the [`engram_core::store::JobStore`] part of the store. Durable background jobs: enqueue (deduplicated), claim with a lease, heartbeat, finish, fail or retry, list.

use super::*;

#[async_trait]
impl JobStore for SqliteStore {
    async fn enqueue_job(&self, job: &Job) -> Result<bool> {
        let mut tx = self.begin().await?;
        let n = sqlx::query(
            "INSERT OR IGNORE INTO jobs (id, tenant_id, user_id, kind, dedup_key, lock_key, payload, status, attempts, \
             max_attempts, run_after, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?)",
        )
        .bind(&job.id)
        .bind(job.tenant_id.as_str())
        .bind(job.user_id.as_ref().map(UserId::as_str))
        .bind(job.kind.as_str())
        .bind(job.dedup_key.as_deref())
        .bind(job.lock_key.as_deref())
        .bind(job.payload.to_string())
        .bind(job.max_attempts)
        .bind(ts(job.run_after))
        .bind(ts(job.created_at))
        .bind(ts(job.updated_at))
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected();
        tx.commit().await.map_err(db)?;
        Ok(n == 1)
    }

    async fn claim_job(
        &self,
        now: OffsetDateTime,
        lease_until: OffsetDateTime,
        kinds: &[JobKind],
    ) -> Result<Option<Job>> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(
            "UPDATE jobs SET status = 'running', attempts = attempts + 1, lease_until = ?1, updated_at = ?2 \
             WHERE id = (SELECT j.id FROM jobs j \
               WHERE ((j.status = 'pending' AND j.run_after <= ?2) OR (j.status = 'running' AND j.lease_until <= ?2)) \
                 AND j.kind IN (SELECT value FROM json_each(?3)) \
                 AND (j.lock_key IS NULL OR NOT EXISTS (SELECT 1 FROM jobs r WHERE r.tenant_id = j.tenant_id \
                      AND r.lock_key = j.lock_key AND r.status = 'running' AND r.lease_until > ?2 AND r.id != j.id)) \
               ORDER BY j.run_after, j.id LIMIT 1) \
             RETURNING *",
        )
        .bind(ts(lease_until))
        .bind(ts(now))
        .bind(serde_json::json!(kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>()).to_string())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        row.as_ref().map(job_from_row).transpose()
    }

    async fn heartbeat_job(&self, id: &str, lease_until: OffsetDateTime) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE jobs SET lease_until = ? WHERE id = ? AND status = 'running'")
            .bind(ts(lease_until))
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn complete_job(&self, id: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query("UPDATE jobs SET status = 'done', lease_until = NULL, last_error = NULL, updated_at = ? WHERE id = ?")
            .bind(ts(OffsetDateTime::now_utc()))
            .bind(id)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn fail_job(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<OffsetDateTime>,
    ) -> Result<()> {
        let mut tx = self.begin().await?;
        let now = ts(OffsetDateTime::now_utc());
        match retry_at {
            Some(at) => {
                // Back to pending; if another pending job took the dedup key meanwhile, that
                // one covers the same data and this one is closed.
                let r = sqlx::query(
                    "UPDATE OR IGNORE jobs SET status = 'pending', run_after = ?, lease_until = NULL, last_error = ?, updated_at = ? WHERE id = ?",
                )
                .bind(ts(at))
                .bind(error)
                .bind(now)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(db)?;
                if r.rows_affected() == 0 {
                    sqlx::query("UPDATE jobs SET status = 'done', lease_until = NULL, last_error = ?, updated_at = ? WHERE id = ?")
                        .bind(format!("superseded by a newer pending job after: {error}"))
                        .bind(now)
                        .bind(id)
                        .execute(&mut *tx)
                        .await
                        .map_err(db)?;
                }
            }
            None => {
                sqlx::query("UPDATE jobs SET status = 'failed', lease_until = NULL, last_error = ?, updated_at = ? WHERE id = ?")
                    .bind(error)
                    .bind(now)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(db)?;
            }
        }
        tx.commit().await.map_err(db)
    }

    async fn list_jobs(
        &self,
        tenant: Option<&TenantId>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let rows = sqlx::query(
            "SELECT * FROM jobs WHERE (?1 IS NULL OR tenant_id = ?1) AND (?2 IS NULL OR status = ?2) ORDER BY created_at DESC, id DESC LIMIT ?3",
        )
        .bind(tenant.map(TenantId::as_str))
        .bind(status.map(JobStatus::as_str))
        .bind(limit as i64)
        .fetch_all(&self.read)
        .await
        .map_err(db)?;
        rows.iter().map(job_from_row).collect()
    }

    async fn retry_job(&self, tenant: Option<&TenantId>, id: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        let n = sqlx::query(
            "UPDATE OR IGNORE jobs SET status = 'pending', attempts = 0, run_after = ?1, last_error = NULL, updated_at = ?1 \
             WHERE id = ?2 AND status = 'failed' AND (?3 IS NULL OR tenant_id = ?3)",
        )
        .bind(ts(OffsetDateTime::now_utc()))
        .bind(id)
        .bind(tenant.map(TenantId::as_str))
        .execute(&mut *tx)
        .await
        .map_err(db)?
        .rows_affected();
        tx.commit().await.map_err(db)?;
        if n == 0 {
            return Err(Error::not_found(format!("failed job {id}")));
        }
        Ok(())
    }
}
