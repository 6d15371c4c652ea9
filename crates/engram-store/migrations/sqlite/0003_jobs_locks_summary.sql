-- Jobs: one PENDING job per dedup key (a running extraction must not swallow the turn that
-- arrives while it runs), and a lock key so that at most one job per conversation runs.
ALTER TABLE jobs ADD COLUMN lock_key TEXT;
DROP INDEX jobs_dedup;
CREATE UNIQUE INDEX jobs_dedup ON jobs (tenant_id, dedup_key) WHERE dedup_key IS NOT NULL AND status = 'pending';
CREATE INDEX jobs_lock ON jobs (tenant_id, lock_key, status);

-- The rolling summary of a conversation (regenerated, not appended) and how many user
-- turns it covered when it was made.
ALTER TABLE conversations ADD COLUMN rolling_summary TEXT;
ALTER TABLE conversations ADD COLUMN summary_user_turns INTEGER NOT NULL DEFAULT 0;
