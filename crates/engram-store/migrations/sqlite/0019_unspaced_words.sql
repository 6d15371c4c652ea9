-- Words written without spaces (issue 13). FTS5's `unicode61` tokenizer keeps a run of
-- Chinese or Japanese characters as one word, so `北京` did not find `用户住在北京`. A row
-- whose text has such characters now carries `keyword_text`: its words as
-- `text::index_text` splits them (each such character and each overlapping pair, the way
-- queries ask for them), written by the store on every write path (insert, a message's
-- late content, a restore); the indexes read `coalesce(keyword_text, content)`, so every
-- other row is indexed as before and costs nothing more. The rows already stored are filled
-- by the migration runner right after this script, in its transaction
-- (`migrate::after_sqlite`), which re-indexes them through the update triggers below.
ALTER TABLE memories ADD COLUMN keyword_text TEXT;
ALTER TABLE messages ADD COLUMN keyword_text TEXT;
ALTER TABLE summaries ADD COLUMN keyword_text TEXT;

DROP TRIGGER memories_fts_ai;
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO keyword_scopes (tenant_id, user_id)
    SELECT new.tenant_id, s.u FROM (SELECT new.user_id AS u UNION ALL SELECT '') s
    WHERE NOT EXISTS (SELECT 1 FROM keyword_scopes k WHERE k.tenant_id = new.tenant_id AND k.user_id = s.u);
    UPDATE keyword_scopes SET memories = memories + 1
    WHERE tenant_id IN (new.tenant_id, '') AND user_id IN (new.user_id, '');
    INSERT INTO memories_fts (rowid, content, scope)
    SELECT new.rowid, coalesce(new.keyword_text, new.content), memory_tokens FROM keyword_scope_tokens
    WHERE tenant_id = new.tenant_id AND user_id = new.user_id;
END;
-- A memory's text never changes; its keyword text does, once, when this migration fills it.
CREATE TRIGGER memories_fts_au AFTER UPDATE OF keyword_text ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.rowid;
    INSERT INTO memories_fts (rowid, content, scope)
    SELECT new.rowid, coalesce(new.keyword_text, new.content), memory_tokens FROM keyword_scope_tokens
    WHERE tenant_id = new.tenant_id AND user_id = new.user_id;
END;

DROP TRIGGER summaries_fts_ai;
DROP TRIGGER summaries_fts_au;
CREATE TRIGGER summaries_fts_ai AFTER INSERT ON summaries BEGIN
    INSERT INTO keyword_scopes (tenant_id, user_id)
    SELECT new.tenant_id, new.user_id
    WHERE NOT EXISTS (SELECT 1 FROM keyword_scopes k WHERE k.tenant_id = new.tenant_id AND k.user_id = new.user_id);
    UPDATE keyword_scopes SET summaries = summaries + 1
    WHERE (tenant_id = new.tenant_id AND user_id = new.user_id) OR (tenant_id = '' AND user_id = '');
    INSERT INTO summaries_fts (rowid, content, scope)
    SELECT new.rowid, coalesce(new.keyword_text, new.content), user_token FROM keyword_scope_tokens
    WHERE tenant_id = new.tenant_id AND user_id = new.user_id;
END;
CREATE TRIGGER summaries_fts_au AFTER UPDATE OF content, keyword_text ON summaries BEGIN
    DELETE FROM summaries_fts WHERE rowid = old.rowid;
    INSERT INTO summaries_fts (rowid, content, scope)
    SELECT new.rowid, coalesce(new.keyword_text, new.content), user_token FROM keyword_scope_tokens
    WHERE tenant_id = new.tenant_id AND user_id = new.user_id;
END;

-- Messages as in migration 12, each message's own words and its context read through
-- `keyword_text` where there is one.
DROP TRIGGER messages_fts_ai;
DROP TRIGGER messages_fts_au;
DROP VIEW messages_fts_rows;
CREATE VIEW messages_fts_rows AS
SELECT m.rowid AS message_rowid, m.tenant_id, m.conversation_id, m.seq,
    coalesce(m.keyword_text, m.content) AS content,
    coalesce(m.tool_name, '') AS tool_name,
    coalesce((SELECT group_concat(substr(p.words || ' ' || coalesce(p.tool_name, ''), -800), char(10))
        FROM (SELECT coalesce(keyword_text, content) AS words, tool_name FROM messages
            WHERE tenant_id = m.tenant_id AND conversation_id = m.conversation_id AND seq < m.seq
            ORDER BY seq DESC LIMIT 2) p), '') AS context,
    (SELECT user_token FROM keyword_scope_tokens k
        WHERE k.tenant_id = m.tenant_id AND k.user_id = m.user_id) AS scope
FROM messages m;
CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
    INSERT INTO keyword_scopes (tenant_id, user_id)
    SELECT new.tenant_id, new.user_id
    WHERE NOT EXISTS (SELECT 1 FROM keyword_scopes k WHERE k.tenant_id = new.tenant_id AND k.user_id = new.user_id);
    UPDATE keyword_scopes SET messages = messages + 1
    WHERE (tenant_id = new.tenant_id AND user_id = new.user_id) OR (tenant_id = '' AND user_id = '');
    DELETE FROM messages_fts WHERE rowid IN (SELECT rowid FROM messages
        WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
        ORDER BY seq LIMIT 3);
    INSERT INTO messages_fts (rowid, content, tool_name, context, scope)
    SELECT message_rowid, content, tool_name, context, scope FROM messages_fts_rows
    WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
    ORDER BY seq LIMIT 3;
END;
CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, tool_name, keyword_text ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid IN (SELECT rowid FROM messages
        WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
        ORDER BY seq LIMIT 3);
    INSERT INTO messages_fts (rowid, content, tool_name, context, scope)
    SELECT message_rowid, content, tool_name, context, scope FROM messages_fts_rows
    WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
    ORDER BY seq LIMIT 3;
END;
