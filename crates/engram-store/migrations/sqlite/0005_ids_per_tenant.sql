-- Memory, message and summary ids are unique per tenant, as on PostgreSQL, instead of across
-- the whole store: a tenant's backup can then be restored into another tenant of the same
-- store with its ids kept (`engram import --tenant`). SQLite cannot change a constraint in
-- place, so each table is rebuilt with the same columns and rowids (the FTS5 indexes refer
-- to rowids and stay valid); its indexes and triggers are made again.

CREATE TABLE memories_new (
    rowid                  INTEGER PRIMARY KEY,
    id                     TEXT NOT NULL,
    tenant_id              TEXT NOT NULL,
    user_id                TEXT NOT NULL,
    agent_id               TEXT,
    pool                   TEXT,
    kind                   TEXT NOT NULL,
    key                    TEXT,
    category               TEXT NOT NULL,
    importance             INTEGER NOT NULL CHECK (importance BETWEEN 1 AND 10),
    rating                 INTEGER NOT NULL DEFAULT 0,
    content                TEXT NOT NULL,
    source_kind            TEXT NOT NULL,
    source_conversation_id TEXT,
    source_message_ids     TEXT NOT NULL DEFAULT '[]',
    observed_at            INTEGER NOT NULL,
    created_at             INTEGER NOT NULL,
    updated_at             INTEGER NOT NULL,
    last_accessed_at       INTEGER,
    access_count           INTEGER NOT NULL DEFAULT 0,
    mention_count          INTEGER NOT NULL DEFAULT 1,
    expires_at             INTEGER,
    superseded_at          INTEGER,
    superseded_by          TEXT,
    metadata               TEXT NOT NULL DEFAULT '{}',
    embedding              BLOB,
    embedding_model        TEXT,
    version                INTEGER NOT NULL,
    UNIQUE (tenant_id, id)
);
INSERT INTO memories_new (rowid, id, tenant_id, user_id, agent_id, pool, kind, key, category,
    importance, rating, content, source_kind, source_conversation_id, source_message_ids,
    observed_at, created_at, updated_at, last_accessed_at, access_count, mention_count,
    expires_at, superseded_at, superseded_by, metadata, embedding, embedding_model, version)
SELECT rowid, id, tenant_id, user_id, agent_id, pool, kind, key, category,
    importance, rating, content, source_kind, source_conversation_id, source_message_ids,
    observed_at, created_at, updated_at, last_accessed_at, access_count, mention_count,
    expires_at, superseded_at, superseded_by, metadata, embedding, embedding_model, version
FROM memories;
DROP TABLE memories;
ALTER TABLE memories_new RENAME TO memories;
CREATE INDEX memories_scope ON memories (tenant_id, user_id, superseded_at, id);
CREATE INDEX memories_version ON memories (tenant_id, user_id, version);
CREATE INDEX memories_profile ON memories (tenant_id, user_id, key) WHERE kind = 'profile';
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;

CREATE TABLE messages_new (
    rowid           INTEGER PRIMARY KEY,
    id              TEXT NOT NULL,
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    agent_id        TEXT,
    seq             INTEGER NOT NULL,
    role            TEXT NOT NULL,
    content         TEXT NOT NULL,
    tool_name       TEXT,
    tool_args       TEXT,
    tool_result     TEXT,
    turn_id         TEXT,
    metadata        TEXT NOT NULL DEFAULT '{}',
    created_at      INTEGER NOT NULL,
    rating          INTEGER NOT NULL DEFAULT 0,
    embedding       BLOB,
    embedding_model TEXT,
    UNIQUE (tenant_id, id),
    UNIQUE (tenant_id, conversation_id, seq)
);
INSERT INTO messages_new (rowid, id, tenant_id, conversation_id, user_id, agent_id, seq, role,
    content, tool_name, tool_args, tool_result, turn_id, metadata, created_at, rating,
    embedding, embedding_model)
SELECT rowid, id, tenant_id, conversation_id, user_id, agent_id, seq, role,
    content, tool_name, tool_args, tool_result, turn_id, metadata, created_at, rating,
    embedding, embedding_model
FROM messages;
DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;
CREATE INDEX messages_user ON messages (tenant_id, user_id);
CREATE INDEX messages_turn ON messages (tenant_id, turn_id);
CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content, tool_name) VALUES (new.rowid, new.content, coalesce(new.tool_name, ''));
END;
CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name) VALUES ('delete', old.rowid, old.content, coalesce(old.tool_name, ''));
END;
CREATE TRIGGER messages_fts_au AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content, tool_name) VALUES ('delete', old.rowid, old.content, coalesce(old.tool_name, ''));
    INSERT INTO messages_fts (rowid, content, tool_name) VALUES (new.rowid, new.content, coalesce(new.tool_name, ''));
END;

CREATE TABLE summaries_new (
    tenant_id       TEXT NOT NULL,
    id              TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    conversation_id TEXT,
    parent_id       TEXT,
    depth           INTEGER NOT NULL DEFAULT 0,
    kind            TEXT NOT NULL DEFAULT 'leaf',
    content         TEXT NOT NULL,
    message_count   INTEGER NOT NULL DEFAULT 0,
    earliest_at     INTEGER,
    latest_at       INTEGER,
    embedding       BLOB,
    embedding_model TEXT,
    model           TEXT,
    created_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
INSERT INTO summaries_new (tenant_id, id, user_id, conversation_id, parent_id, depth, kind,
    content, message_count, earliest_at, latest_at, embedding, embedding_model, model, created_at)
SELECT tenant_id, id, user_id, conversation_id, parent_id, depth, kind,
    content, message_count, earliest_at, latest_at, embedding, embedding_model, model, created_at
FROM summaries;
DROP TABLE summaries;
ALTER TABLE summaries_new RENAME TO summaries;
CREATE INDEX summaries_user ON summaries (tenant_id, user_id);
