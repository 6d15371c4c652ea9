-- Words written without spaces (issue 13), as SQLite's migration 19. `fts_text`, made in
-- Rust by `text::index_text`, now splits a run of Chinese or Japanese characters into each
-- character and each overlapping pair (queries ask for the pairs), so `北京` finds
-- `用户住在北京`. Rows written from now on get it on insert; the rows already stored get
-- their new `fts_text` from the migration runner right after this script, in its
-- transaction (`migrate::after_postgres`). Messages and summaries already keep their
-- context and statistics through `UPDATE OF fts_text` triggers (migrations 10 and 11).
-- Memories were never updated in their text, so their statistics had triggers on insert and
-- delete only: a change of `fts_text` now moves the row's lexemes in `memory_fts_stats`.
CREATE FUNCTION engram_memory_stats_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_fts_stats AS s (tenant_id, user_id, lexeme, rows, len)
    SELECT NEW.tenant_id, NEW.user_id, lexeme, sum(rows), sum(len) FROM (
        SELECT '' AS lexeme, 0 AS rows, length(NEW.fts) - length(OLD.fts) AS len
        UNION ALL SELECT l, -1, 0 FROM unnest(tsvector_to_array(OLD.fts)) AS l
        UNION ALL SELECT l, 1, 0 FROM unnest(tsvector_to_array(NEW.fts)) AS l
    ) x GROUP BY lexeme HAVING sum(rows) <> 0 OR lexeme = ''
    ORDER BY lexeme
    ON CONFLICT (tenant_id, user_id, lexeme)
    DO UPDATE SET rows = s.rows + excluded.rows, len = s.len + excluded.len;
    DELETE FROM memory_fts_stats s
    WHERE s.tenant_id = NEW.tenant_id AND s.user_id = NEW.user_id AND s.lexeme <> ''
        AND s.rows <= 0 AND s.lexeme IN (SELECT unnest(tsvector_to_array(OLD.fts)));
    RETURN NULL;
END
$$;

CREATE TRIGGER memories_fts_stats_update AFTER UPDATE OF fts_text ON memories
    FOR EACH ROW WHEN (OLD.fts IS DISTINCT FROM NEW.fts)
    EXECUTE FUNCTION engram_memory_stats_update();
