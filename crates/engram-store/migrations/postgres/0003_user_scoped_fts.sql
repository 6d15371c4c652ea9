-- Keyword search reads only the searched user's rows (issue 4: at 1M rows its cost grew with
-- the whole table). A search ranks with BM25 statistics of the user's corpus (row count,
-- mean length, per-term document frequencies) and then scans the matching rows; with a GIN
-- index on `fts` alone every step intersected the user's btree range with posting lists of
-- every user's rows, and the mean length read every one of the user's rows from the heap.

-- The lexeme count of `fts` (= length(fts)), written with the row, so that the user's row
-- count and mean length come from an index-only scan. NULL for rows written before this
-- migration (no table rewrite, which would rebuild the HNSW index); the search adds
-- length(fts) of those rows, found through the partial index.
ALTER TABLE memories ADD COLUMN fts_len integer;
CREATE INDEX memories_fts_len ON memories (tenant_id, user_id, fts_len);
CREATE INDEX memories_fts_len_missing ON memories (tenant_id, user_id) WHERE fts_len IS NULL;

-- GIN indexes led by (tenant_id, user_id): btree_gin (shipped with PostgreSQL, a trusted
-- extension, so a database owner may create it) lets GIN index the text columns, and a
-- search's `tenant_id = … AND user_id = … AND fts @@ …` then reads only that user's postings.
-- Without the extension the table-wide indexes stay (the store logs a warning at start-up).
DO $$
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS btree_gin;
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'engram: cannot create extension btree_gin (%); keyword search keeps the table-wide GIN indexes', SQLERRM;
        RETURN;
    END;
    CREATE INDEX memories_fts_user ON memories USING gin (tenant_id, user_id, fts);
    DROP INDEX memories_fts;
    CREATE INDEX messages_fts_user ON messages USING gin (tenant_id, user_id, fts);
    DROP INDEX messages_fts;
END
$$;
