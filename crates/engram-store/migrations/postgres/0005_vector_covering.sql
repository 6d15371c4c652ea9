-- Exact vector search reads the user's vectors from a covering btree index (issue 4: HTTP
-- search at 1M rows). The exact path ranks every active vector of the user; rows of all users
-- are interleaved in the heap, so a user of 10k rows sat on ~10k heap pages (~20 ms at 1M
-- rows). Here the user's vectors and every column the filter reads are in one btree, next to
-- each other in its leaf pages, and the scan is index-only (the visibility map tells which
-- heap pages it may skip; autovacuum keeps it current, below).
--
-- One partial index per embedding dimension, for the store's dimension only, and only when a
-- tuple always fits a btree page (~2.7 kB): `memories_vec_<N>` for N <= 500 dimensions (a
-- 1536-dimension vector is 6 kB and would fail the insert), on rows whose tenant and user ids
-- take at most 512 bytes together (ids may be up to 256 characters each; a scope over that
-- is searched through the heap as before, the query decides per scope). The store creates it
-- with the space (`ensure_space`, see src/postgres/search.rs); this migration creates it for
-- stores that already have one. Its definition is `covering_index_ddl` in search.rs: keep
-- both in step.
DO $$
DECLARE
    dims int;
BEGIN
    SELECT value::int INTO dims FROM meta WHERE key = 'embedding_dims' AND value ~ '^[0-9]+$';
    IF dims IS NOT NULL AND dims <= 500 THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS memories_vec_%s ON memories (tenant_id, user_id) '
            'INCLUDE (id, kind, category, observed_at, expires_at, superseded_at, embedding) '
            'WHERE superseded_at IS NULL AND vector_dims(embedding) = %s '
            'AND octet_length(tenant_id) + octet_length(user_id) <= 512', dims, dims);
    END IF;
END
$$;

-- Index-only scans skip only heap pages marked all-visible, which inserts and the access
-- counts every search bumps clear until the next VACUUM: vacuum after 2 % of the table
-- changed or was inserted (PostgreSQL's defaults, 20 % for updates, leave a 1M-row table
-- unvacuumed for 200k updates).
ALTER TABLE memories SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02);
