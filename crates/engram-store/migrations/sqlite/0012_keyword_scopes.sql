-- Keyword statistics per user (the trust issue's rule that nothing crosses a tenant, applied
-- to the keyword index). Until here a keyword search dropped a query word found in half the
-- index's rows or more counted over the whole store (`max(rowid)` and the fts5vocab
-- tables): a word that one user wrote everywhere stopped matching for every user of every
-- tenant. Found by a session: user `a`'s "I bought a red kayak" was no longer found by
-- `recall kayak` once user `b` had stored six facts about kayaks.
--
-- Every row of the three keyword indexes now carries its scope in a fourth (or second)
-- column, `scope`: the token `u<id>` of its (tenant, user) and, for memories, `t<id>` of its
-- tenant (memory search may name no user), where <id> is the row of `keyword_scopes`. A
-- search ANDs the scope token into its FTS5 query (`scope : u7 AND {content} : (...)`), so
-- FTS5 seeks the user's doclist instead of reading every user's postings, and the drop rule
-- counts a word's rows within the scope (`count(*)` of the same AND) against the scope's
-- row count, kept here by the triggers (as PostgreSQL's `memory_fts_stats` per user). The
-- column weighs 0 in bm25(). Query words are matched only in the other columns, so a user's
-- word "u7" never matches a scope token.
--
-- A scope row goes when its last indexed row goes (erasure leaves no user id behind). Scope
-- rows are derived: not exported, not copied by `engram migrate`.
--
-- The three indexes are contentless (`content = ''`, `contentless_delete`): the memory and
-- summary indexes read their columns from the rows before, and `scope` is no column of them.
-- Triggers create a scope row with `INSERT … WHERE NOT EXISTS`, never `OR IGNORE`: a
-- trigger's statements take the conflict policy of the statement that fired it, and an
-- `INSERT OR REPLACE` would have replaced the scope row under a new id.
DROP TRIGGER IF EXISTS memories_fts_ai;
DROP TRIGGER IF EXISTS memories_fts_ad;
DROP TRIGGER IF EXISTS summaries_fts_ai;
DROP TRIGGER IF EXISTS summaries_fts_ad;
DROP TRIGGER IF EXISTS summaries_fts_au;
DROP TRIGGER IF EXISTS messages_fts_ai;
DROP TRIGGER IF EXISTS messages_fts_ad;
DROP TRIGGER IF EXISTS messages_fts_au;
DROP TABLE IF EXISTS memories_fts_vocab;
DROP TABLE IF EXISTS messages_fts_vocab;
DROP TABLE IF EXISTS summaries_fts_vocab;
DROP TABLE IF EXISTS memories_fts;
DROP TABLE IF EXISTS messages_fts;
DROP TABLE IF EXISTS summaries_fts;
DROP VIEW IF EXISTS messages_fts_rows;

-- One row per (tenant, user) with indexed rows, per tenant (user_id '', never a valid user
-- id) for memories, and one for the whole store (tenant_id and user_id ''); how many rows of
-- each index the scope holds. When a scope holds every row of an index (a store of one
-- user), a search leaves its token out: the same rows match, without reading the token's
-- doclist (at 100k rows of one user it cost ~2 ms per query term).
CREATE TABLE keyword_scopes (
    id        INTEGER PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    user_id   TEXT NOT NULL,
    memories  INTEGER NOT NULL DEFAULT 0,
    messages  INTEGER NOT NULL DEFAULT 0,
    summaries INTEGER NOT NULL DEFAULT 0,
    UNIQUE (tenant_id, user_id)
);
INSERT INTO keyword_scopes (tenant_id, user_id, memories)
SELECT tenant_id, user_id, count(*) FROM memories GROUP BY tenant_id, user_id;
INSERT INTO keyword_scopes (tenant_id, user_id, memories)
SELECT tenant_id, '', count(*) FROM memories GROUP BY tenant_id;
INSERT INTO keyword_scopes (tenant_id, user_id, memories, messages, summaries)
VALUES ('', '', (SELECT count(*) FROM memories), (SELECT count(*) FROM messages),
    (SELECT count(*) FROM summaries));
INSERT INTO keyword_scopes (tenant_id, user_id)
SELECT DISTINCT tenant_id, user_id FROM messages WHERE true
ON CONFLICT (tenant_id, user_id) DO NOTHING;
INSERT INTO keyword_scopes (tenant_id, user_id)
SELECT DISTINCT tenant_id, user_id FROM summaries WHERE true
ON CONFLICT (tenant_id, user_id) DO NOTHING;
UPDATE keyword_scopes SET
    messages = (SELECT count(*) FROM messages m
        WHERE m.tenant_id = keyword_scopes.tenant_id AND m.user_id = keyword_scopes.user_id),
    summaries = (SELECT count(*) FROM summaries s
        WHERE s.tenant_id = keyword_scopes.tenant_id AND s.user_id = keyword_scopes.user_id)
WHERE user_id != '' AND tenant_id != '';

-- The scope tokens of a (tenant, user): `u<id>`, and for memories `t<id>` too.
CREATE VIEW keyword_scope_tokens AS
SELECT u.tenant_id, u.user_id, 'u' || u.id AS user_token, 'u' || u.id || ' t' || t.id AS memory_tokens
FROM keyword_scopes u LEFT JOIN keyword_scopes t ON t.tenant_id = u.tenant_id AND t.user_id = ''
WHERE u.user_id != '' AND u.tenant_id != '';

CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, scope, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO memories_fts (rowid, content, scope)
SELECT m.rowid, m.content, k.memory_tokens FROM memories m
JOIN keyword_scope_tokens k ON k.tenant_id = m.tenant_id AND k.user_id = m.user_id;
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO keyword_scopes (tenant_id, user_id)
    SELECT new.tenant_id, s.u FROM (SELECT new.user_id AS u UNION ALL SELECT '') s
    WHERE NOT EXISTS (SELECT 1 FROM keyword_scopes k WHERE k.tenant_id = new.tenant_id AND k.user_id = s.u);
    UPDATE keyword_scopes SET memories = memories + 1
    WHERE tenant_id IN (new.tenant_id, '') AND user_id IN (new.user_id, '');
    INSERT INTO memories_fts (rowid, content, scope)
    SELECT new.rowid, new.content, memory_tokens FROM keyword_scope_tokens
    WHERE tenant_id = new.tenant_id AND user_id = new.user_id;
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    DELETE FROM memories_fts WHERE rowid = old.rowid;
    UPDATE keyword_scopes SET memories = memories - 1
    WHERE tenant_id IN (old.tenant_id, '') AND user_id IN (old.user_id, '');
    DELETE FROM keyword_scopes WHERE tenant_id = old.tenant_id AND user_id IN (old.user_id, '')
        AND memories = 0 AND messages = 0 AND summaries = 0;
END;

CREATE VIRTUAL TABLE summaries_fts USING fts5 (
    content, scope, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO summaries_fts (rowid, content, scope)
SELECT s.rowid, s.content, k.user_token FROM summaries s
JOIN keyword_scope_tokens k ON k.tenant_id = s.tenant_id AND k.user_id = s.user_id;
CREATE TRIGGER summaries_fts_ai AFTER INSERT ON summaries BEGIN
    INSERT INTO keyword_scopes (tenant_id, user_id)
    SELECT new.tenant_id, new.user_id
    WHERE NOT EXISTS (SELECT 1 FROM keyword_scopes k WHERE k.tenant_id = new.tenant_id AND k.user_id = new.user_id);
    UPDATE keyword_scopes SET summaries = summaries + 1
    WHERE (tenant_id = new.tenant_id AND user_id = new.user_id) OR (tenant_id = '' AND user_id = '');
    INSERT INTO summaries_fts (rowid, content, scope)
    SELECT new.rowid, new.content, user_token FROM keyword_scope_tokens
    WHERE tenant_id = new.tenant_id AND user_id = new.user_id;
END;
CREATE TRIGGER summaries_fts_au AFTER UPDATE OF content ON summaries BEGIN
    DELETE FROM summaries_fts WHERE rowid = old.rowid;
    INSERT INTO summaries_fts (rowid, content, scope)
    SELECT new.rowid, new.content, user_token FROM keyword_scope_tokens
    WHERE tenant_id = new.tenant_id AND user_id = new.user_id;
END;
CREATE TRIGGER summaries_fts_ad AFTER DELETE ON summaries BEGIN
    DELETE FROM summaries_fts WHERE rowid = old.rowid;
    UPDATE keyword_scopes SET summaries = summaries - 1
    WHERE (tenant_id = old.tenant_id AND user_id = old.user_id) OR (tenant_id = '' AND user_id = '');
    DELETE FROM keyword_scopes WHERE tenant_id = old.tenant_id AND user_id = old.user_id
        AND memories = 0 AND messages = 0 AND summaries = 0;
END;

-- Messages as in migration 11 (own words, tool name, the two messages before as context),
-- plus the scope.
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content, tool_name, context, scope, content = '', contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIEW messages_fts_rows AS
SELECT m.rowid AS message_rowid, m.tenant_id, m.conversation_id, m.seq, m.content,
    coalesce(m.tool_name, '') AS tool_name,
    coalesce((SELECT group_concat(substr(p.content || ' ' || coalesce(p.tool_name, ''), -800), char(10))
        FROM (SELECT content, tool_name FROM messages
            WHERE tenant_id = m.tenant_id AND conversation_id = m.conversation_id AND seq < m.seq
            ORDER BY seq DESC LIMIT 2) p), '') AS context,
    (SELECT user_token FROM keyword_scope_tokens k
        WHERE k.tenant_id = m.tenant_id AND k.user_id = m.user_id) AS scope
FROM messages m;
INSERT INTO messages_fts (rowid, content, tool_name, context, scope)
SELECT message_rowid, content, tool_name, context, scope FROM messages_fts_rows;
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
CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, tool_name ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid IN (SELECT rowid FROM messages
        WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
        ORDER BY seq LIMIT 3);
    INSERT INTO messages_fts (rowid, content, tool_name, context, scope)
    SELECT message_rowid, content, tool_name, context, scope FROM messages_fts_rows
    WHERE tenant_id = new.tenant_id AND conversation_id = new.conversation_id AND seq >= new.seq
    ORDER BY seq LIMIT 3;
END;
CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.rowid;
    UPDATE keyword_scopes SET messages = messages - 1
    WHERE (tenant_id = old.tenant_id AND user_id = old.user_id) OR (tenant_id = '' AND user_id = '');
    DELETE FROM keyword_scopes WHERE tenant_id = old.tenant_id AND user_id = old.user_id
        AND memories = 0 AND messages = 0 AND summaries = 0;
END;
