-- Keyword search over a large transcript (issue 13's 100k messages and their summaries of one
-- user, benches/README "PostgreSQL: the same search, and what made it slow"): p95
-- 3.1 s against SQLite's 95 ms. Two causes, both fixed here.
--
-- 1. The planner priced engram_scoped_fts() at the default 100 operator costs, as if it were
--    a comparison. It rebuilds a tsvector with the scope key on every lexeme (~5-9 us a row,
--    more for a long summary), so counting a term's rows by a sequential scan that calls it
--    on every row looked cheaper than the GIN index made for exactly that: a term of a
--    summary search took 425 ms through the scan, 2 ms through the index (EXPLAIN ANALYZE,
--    4,000 summaries). Its true cost, declared, makes the planner take the index. Only on the
--    function the indexes and queries name: declaring it on engram_scoped_fts_long too, which
--    the first calls, made the first ~2.5 times slower to evaluate (ANALYZE of 100k messages
--    1.7 s -> 4.7 s; every message's vector write, which updates its two index entries, paid
--    it too).
ALTER FUNCTION engram_scoped_fts(text, text, tsvector) COST 10000;

-- 2. BM25's corpus statistics of a transcript search (how many rows the user has, and their
--    mean length) re-read every message of the user: a parallel scan of 100k rows, 190-250
--    ms of every search. Here, per (tenant, user) and table ('messages' or 'summaries'): the
--    row count and the sum of the rows' lexeme counts as the search measures a row's length
--    (a message's own lexemes and its context's, `length(fts) + length(ctx_fts)`; a
--    summary's `length(fts)`), kept by triggers on every write path (the store's, `engram
--    migrate`'s, an operator's SQL) in the writer's transaction, as migration 4 keeps the
--    memories' statistics. Rows come and go by INSERT and DELETE (statement triggers, the
--    upserts in key order, so two writers never wait on each other in a cycle); a message's
--    context changes when messages are appended after it (migration 10's trigger), so a row
--    trigger adds the difference when `fts` or `ctx_fts` really changes. A (tenant, user,
--    table) row goes with the user's last row: erasure leaves nothing behind.
CREATE TABLE transcript_fts_stats (
    tenant_id text NOT NULL,
    user_id   text NOT NULL,
    source    text NOT NULL,
    rows      bigint NOT NULL,
    len       bigint NOT NULL,
    PRIMARY KEY (tenant_id, user_id, source)
);

CREATE FUNCTION engram_transcript_stats_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'messages' THEN
        INSERT INTO transcript_fts_stats AS s (tenant_id, user_id, source, rows, len)
        SELECT tenant_id, user_id, 'messages', count(*), sum(length(fts) + length(ctx_fts))
        FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (tenant_id, user_id, source)
        DO UPDATE SET rows = s.rows + excluded.rows, len = s.len + excluded.len;
    ELSE
        INSERT INTO transcript_fts_stats AS s (tenant_id, user_id, source, rows, len)
        SELECT tenant_id, user_id, 'summaries', count(*), sum(length(fts))
        FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (tenant_id, user_id, source)
        DO UPDATE SET rows = s.rows + excluded.rows, len = s.len + excluded.len;
    END IF;
    RETURN NULL;
END
$$;

CREATE FUNCTION engram_message_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH gone AS (
        SELECT tenant_id, user_id, count(*) AS rows, sum(length(fts) + length(ctx_fts)) AS len
        FROM old_rows GROUP BY 1, 2
    ),
    locked AS (
        SELECT s.tenant_id, s.user_id FROM transcript_fts_stats s
        JOIN gone g USING (tenant_id, user_id)
        WHERE s.source = 'messages'
        ORDER BY 1, 2 FOR UPDATE OF s
    )
    UPDATE transcript_fts_stats s SET rows = s.rows - g.rows, len = s.len - g.len
    FROM gone g, locked k
    WHERE s.source = 'messages'
      AND (s.tenant_id, s.user_id) = (g.tenant_id, g.user_id)
      AND (k.tenant_id, k.user_id) = (g.tenant_id, g.user_id);
    DELETE FROM transcript_fts_stats s
    WHERE s.source = 'messages' AND s.rows <= 0
      AND (s.tenant_id, s.user_id) IN (SELECT tenant_id, user_id FROM old_rows);
    RETURN NULL;
END
$$;

CREATE FUNCTION engram_summary_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH gone AS (
        SELECT tenant_id, user_id, count(*) AS rows, sum(length(fts)) AS len
        FROM old_rows GROUP BY 1, 2
    ),
    locked AS (
        SELECT s.tenant_id, s.user_id FROM transcript_fts_stats s
        JOIN gone g USING (tenant_id, user_id)
        WHERE s.source = 'summaries'
        ORDER BY 1, 2 FOR UPDATE OF s
    )
    UPDATE transcript_fts_stats s SET rows = s.rows - g.rows, len = s.len - g.len
    FROM gone g, locked k
    WHERE s.source = 'summaries'
      AND (s.tenant_id, s.user_id) = (g.tenant_id, g.user_id)
      AND (k.tenant_id, k.user_id) = (g.tenant_id, g.user_id);
    DELETE FROM transcript_fts_stats s
    WHERE s.source = 'summaries' AND s.rows <= 0
      AND (s.tenant_id, s.user_id) IN (SELECT tenant_id, user_id FROM old_rows);
    RETURN NULL;
END
$$;

-- A row's length changed (a message's context, rewritten when messages are inserted before
-- the messages after it, or its text): add the difference. An upsert, because the row may
-- change before the statement that inserted it has counted it (migration 10's trigger runs
-- on each row of a multi-row insert); the insert then counts the row as it was inserted.
CREATE FUNCTION engram_message_stats_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_fts_stats AS s (tenant_id, user_id, source, rows, len)
    VALUES (NEW.tenant_id, NEW.user_id, 'messages', 0,
        length(NEW.fts) + length(NEW.ctx_fts) - length(OLD.fts) - length(OLD.ctx_fts))
    ON CONFLICT (tenant_id, user_id, source) DO UPDATE SET len = s.len + excluded.len;
    RETURN NULL;
END
$$;

CREATE FUNCTION engram_summary_stats_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_fts_stats AS s (tenant_id, user_id, source, rows, len)
    VALUES (NEW.tenant_id, NEW.user_id, 'summaries', 0, length(NEW.fts) - length(OLD.fts))
    ON CONFLICT (tenant_id, user_id, source) DO UPDATE SET len = s.len + excluded.len;
    RETURN NULL;
END
$$;

CREATE TRIGGER messages_fts_stats_insert AFTER INSERT ON messages
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION engram_transcript_stats_insert();
CREATE TRIGGER messages_fts_stats_delete AFTER DELETE ON messages
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION engram_message_stats_delete();
CREATE TRIGGER messages_fts_stats_update AFTER UPDATE OF fts_text, ctx_fts ON messages
    FOR EACH ROW WHEN (OLD.fts IS DISTINCT FROM NEW.fts OR OLD.ctx_fts IS DISTINCT FROM NEW.ctx_fts)
    EXECUTE FUNCTION engram_message_stats_update();
CREATE TRIGGER summaries_fts_stats_insert AFTER INSERT ON summaries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION engram_transcript_stats_insert();
CREATE TRIGGER summaries_fts_stats_delete AFTER DELETE ON summaries
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION engram_summary_stats_delete();
CREATE TRIGGER summaries_fts_stats_update AFTER UPDATE OF fts_text ON summaries
    FOR EACH ROW WHEN (OLD.fts IS DISTINCT FROM NEW.fts)
    EXECUTE FUNCTION engram_summary_stats_update();

-- The rows already stored.
INSERT INTO transcript_fts_stats (tenant_id, user_id, source, rows, len)
SELECT tenant_id, user_id, 'messages', count(*), sum(length(fts) + length(ctx_fts))
FROM messages GROUP BY 1, 2
UNION ALL
SELECT tenant_id, user_id, 'summaries', count(*), sum(length(fts)) FROM summaries GROUP BY 1, 2;
