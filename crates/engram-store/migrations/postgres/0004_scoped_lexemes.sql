-- Keyword postings per user (issue 4: keyword search at 1M rows). Migration 3 made a search
-- read only the user's rows from the heap, but a GIN index on (tenant_id, user_id, fts) still
-- decodes each query term's posting list for the whole table (one entry tree per column,
-- not per user and term): 4-22 ms per term at 1M rows, growing with every other user.
--
-- Here every lexeme is indexed under a short key of its (tenant, user): the GIN index on
-- engram_scoped_fts(tenant_id, user_id, fts) holds 'k1b2c3d4_maya' for user (t, u)'s rows
-- containing "maya", so one term of one user is one small posting list (0.05-0.13 ms
-- measured in psql at 1M rows). The key is 8 hex characters of md5(tenant, U+001F, user):
-- two scopes that share a key share postings, which costs only speed, because a search
-- still filters tenant_id and user_id. An expression index, not a stored column: no table
-- rewrite (which would also rebuild the HNSW index), nothing to copy in `engram migrate`,
-- and existing rows are indexed by the CREATE INDEX itself.
--
-- Lexemes are indexed cut to their first 500 characters (tsvector's limit is 2046 bytes, the
-- key adds 9): a query term shorter than 500 characters matches a cut lexeme exactly when it
-- matches the whole one (as a word or as a prefix), and the store searches longer terms
-- through the unscoped path. The common case (all lexemes together under 500 bytes, so none
-- is cut) joins strings, ~5 us a row; longer documents cut each lexeme (~9 us).

CREATE FUNCTION engram_fts_key(tenant text, usr text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN left(md5(tenant || chr(31) || usr), 8);

CREATE FUNCTION engram_scoped_fts_long(tenant text, usr text, fts tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN array_to_tsvector(ARRAY(
        SELECT k.key || '_' || left(l, 500)
        FROM (SELECT engram_fts_key(tenant, usr) AS key) AS k, unnest(tsvector_to_array(fts)) AS l));

CREATE FUNCTION engram_scoped_fts(tenant text, usr text, fts tsvector) RETURNS tsvector
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE
        WHEN length(fts) = 0 THEN ''::tsvector
        WHEN octet_length(array_to_string(tsvector_to_array(fts), ' ')) < 500 THEN
            -- Lexemes of `simple` never contain a space.
            array_to_tsvector(string_to_array(
                engram_fts_key(tenant, usr) || '_'
                || array_to_string(tsvector_to_array(fts), ' ' || engram_fts_key(tenant, usr) || '_'),
                ' '))
        ELSE engram_scoped_fts_long(tenant, usr, fts)
    END;

CREATE INDEX memories_fts_scoped ON memories USING gin (engram_scoped_fts(tenant_id, user_id, fts));
CREATE INDEX messages_fts_scoped ON messages USING gin (engram_scoped_fts(tenant_id, user_id, fts));

-- Messages are only ever searched per user: their unscoped GIN index (migration 3's, or
-- migration 1's without btree_gin) has no use left and would only slow appends. Memories
-- keep theirs for searches that name no user (the whole tenant's rows).
DROP INDEX IF EXISTS messages_fts_user;
DROP INDEX IF EXISTS messages_fts;

-- BM25 statistics per user, kept by triggers. With the postings per user, what remained of a
-- keyword search's cost at 1M rows was counting: a term's document frequency counted the
-- user's matching rows one heap page at a time (GIN has no index-only scans, and a bitmap
-- heap scan visits every page for visibility: ~10,000 pages for a word in every row of a
-- user of 10k), and the row count and mean length re-read every row of the user. Here, per
-- (tenant, user): the row '' holds the number of memories (`rows`) and the sum of their
-- lexeme counts (`len`, i.e. length(fts)); the row of a lexeme holds how many of the user's
-- memories contain it. Superseded rows count, as in the SQLite store's FTS5 index (every
-- indexed row). Memories are inserted and deleted, never updated in their text, so
-- statement-level triggers on INSERT and DELETE keep the table exact on every write path
-- (the store's, `engram migrate`'s, an operator's SQL), in the writer's transaction; the
-- upserts go in key order so that two writers never wait on each other in a cycle.
CREATE TABLE memory_fts_stats (
    tenant_id text NOT NULL,
    user_id   text NOT NULL,
    lexeme    text COLLATE "C" NOT NULL,
    rows      bigint NOT NULL,
    len       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, user_id, lexeme)
);

CREATE FUNCTION engram_fts_stats_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_fts_stats AS s (tenant_id, user_id, lexeme, rows, len)
    SELECT tenant_id, user_id, lexeme, sum(rows), sum(len) FROM (
        SELECT tenant_id, user_id, '' AS lexeme, count(*) AS rows, sum(length(fts)) AS len
        FROM new_rows GROUP BY tenant_id, user_id
        UNION ALL
        SELECT n.tenant_id, n.user_id, l, count(*), 0
        FROM new_rows n, unnest(tsvector_to_array(n.fts)) AS l GROUP BY 1, 2, 3
    ) x GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (tenant_id, user_id, lexeme)
    DO UPDATE SET rows = s.rows + excluded.rows, len = s.len + excluded.len;
    RETURN NULL;
END
$$;

CREATE FUNCTION engram_fts_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH gone AS (
        SELECT tenant_id, user_id, '' AS lexeme, count(*) AS rows, sum(length(fts)) AS len
        FROM old_rows GROUP BY tenant_id, user_id
        UNION ALL
        SELECT o.tenant_id, o.user_id, l, count(*), 0
        FROM old_rows o, unnest(tsvector_to_array(o.fts)) AS l GROUP BY 1, 2, 3
    ),
    locked AS (
        SELECT s.tenant_id, s.user_id, s.lexeme FROM memory_fts_stats s
        JOIN gone g USING (tenant_id, user_id, lexeme)
        ORDER BY 1, 2, 3 FOR UPDATE OF s
    )
    UPDATE memory_fts_stats s SET rows = s.rows - g.rows, len = s.len - g.len
    FROM gone g, locked k
    WHERE (s.tenant_id, s.user_id, s.lexeme) = (g.tenant_id, g.user_id, g.lexeme)
      AND (k.tenant_id, k.user_id, k.lexeme) = (g.tenant_id, g.user_id, g.lexeme);
    DELETE FROM memory_fts_stats s
    WHERE s.rows <= 0 AND (s.tenant_id, s.user_id, s.lexeme) IN (
        SELECT tenant_id, user_id, '' FROM old_rows
        UNION SELECT o.tenant_id, o.user_id, l FROM old_rows o, unnest(tsvector_to_array(o.fts)) AS l);
    RETURN NULL;
END
$$;

CREATE TRIGGER memories_fts_stats_insert AFTER INSERT ON memories
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION engram_fts_stats_insert();
CREATE TRIGGER memories_fts_stats_delete AFTER DELETE ON memories
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION engram_fts_stats_delete();

-- The rows already stored.
INSERT INTO memory_fts_stats (tenant_id, user_id, lexeme, rows, len)
SELECT tenant_id, user_id, '', count(*), coalesce(sum(length(fts)), 0) FROM memories GROUP BY 1, 2
UNION ALL
SELECT m.tenant_id, m.user_id, l, count(*), 0
FROM memories m, unnest(tsvector_to_array(m.fts)) AS l GROUP BY 1, 2, 3;
