-- Finished jobs are deleted once they are older than the retention window (`engram serve
-- --job-retention-secs`, 7 days by default; the workers' sweeper, `JobStore::prune_jobs`):
-- every append leaves one `embed_messages` job behind, so they were the one table that grew
-- with use and never shrank. This index holds only the finished jobs, by when they
-- finished, so each sweep reads just the ones it deletes.
CREATE INDEX IF NOT EXISTS jobs_done ON jobs (updated_at) WHERE status = 'done';
-- The newest finished job of a kind in a tenant (`/v1/stats`' last successful extraction)
-- in one index descent.
CREATE INDEX IF NOT EXISTS jobs_done_kind ON jobs (tenant_id, kind, updated_at) WHERE status = 'done';
