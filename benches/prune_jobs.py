"""Finished jobs deleted by the sweeper (`JobStore::prune_jobs`), SQLite side.

One tenant of 1,000,000 jobs (998,000 finished over 30 days, 2,000 pending; the store's
job indexes of migrations 1, 3, 14 and 15; time-ordered ids like the store's UUIDv7), the
store's pragmas (WAL, synchronous NORMAL, 64 MB cache); then the sweeper's statement with
a retention of 7 days, `batch` rows at a time, until 100,000 are deleted, per batch size.

    python3 benches/prune_jobs.py [db path]

PostgreSQL: `benches/prune_jobs_pg.sql` (psql) builds the same table and times the
statement.
"""
import json, os, shutil, sqlite3, statistics, sys, time

path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/engram-prune-jobs.db"
if os.path.exists(path):
    os.remove(path)
c = sqlite3.connect(path)
c.execute("PRAGMA journal_mode=WAL")
c.executescript("""
CREATE TABLE jobs (id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, user_id TEXT, kind TEXT NOT NULL,
  dedup_key TEXT, lock_key TEXT, payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL,
  max_attempts INTEGER NOT NULL, run_after INTEGER NOT NULL, lease_until INTEGER, last_error TEXT,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE INDEX jobs_claim ON jobs (status, run_after);
CREATE INDEX jobs_user ON jobs (tenant_id, user_id);
CREATE UNIQUE INDEX jobs_dedup ON jobs (tenant_id, dedup_key) WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running');
CREATE INDEX jobs_lock ON jobs (tenant_id, lock_key, status);
CREATE INDEX jobs_tenant_status ON jobs (tenant_id, status, kind);
CREATE INDEX jobs_done ON jobs (updated_at) WHERE status = 'done';
""")
now, day = time.time_ns(), 86400 * 10**9
rows = []
for i in range(1, 1_000_001):
    t = now - 30 * day + i * 2 * 10**9
    payload = json.dumps({"conversation_id": f"c{i}", "user_id": f"u{i % 1000}", "pad": "x" * 120})
    rows.append(("%016x-%08d" % (t // 10**6, i), "t", f"u{i % 1000}", "embed_messages", f"embed:c{i}",
                 f"c{i % 5000}", payload, "done" if i <= 998_000 else "pending", 1, 3, t, None, None, t, t))
c.executemany("INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
c.commit()
c.close()
del rows
print(f"sqlite {sqlite3.sqlite_version}, {os.path.getsize(path) / 1e6:.0f} MB")
STATEMENT = ("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs INDEXED BY jobs_done "
             "WHERE status = 'done' AND updated_at < ?1 ORDER BY updated_at LIMIT ?2)")
for batch in (5000, 1000):
    run = path + ".run"
    shutil.copy(path, run)
    c = sqlite3.connect(run)
    for p in ("journal_mode=WAL", "synchronous=NORMAL", "cache_size=-65536"):
        c.execute("PRAGMA " + p)
    cut, ts, total, t0 = time.time_ns() - 7 * day, [], 0, time.time()
    while total < 100_000:
        s = time.time()
        total += c.execute(STATEMENT, (cut, batch)).rowcount
        c.commit()
        ts.append((time.time() - s) * 1000)
    took = time.time() - t0
    print(f"batch {batch}: {total} rows in {len(ts)} statements, {took:.1f} s ({total / took:.0f} rows/s); "
          f"per statement p50 {statistics.median(ts):.0f}, p95 {sorted(ts)[int(len(ts) * .95)]:.0f}, "
          f"max {max(ts):.0f} ms")
    c.close()
    os.remove(run)
