-- Finished jobs deleted by the sweeper (`JobStore::prune_jobs`), PostgreSQL side: one tenant
-- of 1,000,000 jobs (998,000 finished over 30 days), the store's job indexes; the sweeper's
-- statement (1,000 rows) timed twice and explained. `psql <url> -f benches/prune_jobs_pg.sql`
-- (creates and leaves a database `prune`).
DROP DATABASE IF EXISTS prune;
CREATE DATABASE prune;
\c prune
CREATE TABLE jobs (tenant_id text NOT NULL, id text NOT NULL, user_id text, kind text NOT NULL, dedup_key text, lock_key text, payload jsonb NOT NULL DEFAULT '{}', status text NOT NULL, attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 3, run_after timestamptz NOT NULL, lease_until timestamptz, last_error text, created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, PRIMARY KEY (tenant_id, id));
CREATE INDEX jobs_claim ON jobs (run_after, id) WHERE status IN ('pending', 'running');
CREATE INDEX jobs_id ON jobs (id);
CREATE UNIQUE INDEX jobs_dedup ON jobs (tenant_id, dedup_key) WHERE dedup_key IS NOT NULL AND status = 'pending';
CREATE INDEX jobs_lock ON jobs (tenant_id, lock_key, status) WHERE lock_key IS NOT NULL;
CREATE INDEX jobs_user ON jobs (tenant_id, user_id);
CREATE INDEX jobs_list ON jobs (tenant_id, created_at);
CREATE INDEX jobs_tenant_status ON jobs (tenant_id, status, kind);
CREATE INDEX jobs_done ON jobs (updated_at) WHERE status = 'done';
INSERT INTO jobs SELECT 't', gen_random_uuid()::text, 'u' || (i % 1000), 'embed_messages', 'embed:c' || i, 'c' || (i % 5000),
  jsonb_build_object('conversation_id', 'c' || i, 'user_id', 'u' || (i % 1000), 'pad', repeat('x', 120)),
  CASE WHEN i <= 998000 THEN 'done' ELSE 'pending' END, 1, 3, now() - interval '30 days' + i * interval '2 seconds', NULL, NULL,
  now() - interval '30 days' + i * interval '2 seconds', now() - interval '30 days' + i * interval '2 seconds'
FROM generate_series(1, 1000000) i;
VACUUM ANALYZE jobs;
SELECT pg_size_pretty(pg_total_relation_size('jobs'));
\timing on
DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE status = 'done' AND updated_at < now() - interval '7 days' ORDER BY updated_at LIMIT 1000);
DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE status = 'done' AND updated_at < now() - interval '7 days' ORDER BY updated_at LIMIT 1000);
EXPLAIN ANALYZE DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE status = 'done' AND updated_at < now() - interval '7 days' ORDER BY updated_at LIMIT 1000);
