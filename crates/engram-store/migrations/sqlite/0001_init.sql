-- engram embedded store, schema version 1.
-- Every table leads with tenant_id; timestamps are unix nanoseconds (INTEGER, UTC).
-- Applied migrations are never edited: add a new file instead.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('admin', 'agent', 'user')),
    agent_id    TEXT,
    user_id     TEXT,
    prefix      TEXT NOT NULL,
    secret_hash TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE agents (
    tenant_id       TEXT NOT NULL,
    id              TEXT NOT NULL,
    memory_enabled  INTEGER NOT NULL,
    cluster_id      TEXT,
    dedup_threshold REAL NOT NULL,
    settings        TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE TABLE memories (
    rowid                  INTEGER PRIMARY KEY,
    id                     TEXT NOT NULL UNIQUE,
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
    -- The user's change counter when this row last changed (vector-cache catch-up).
    version                INTEGER NOT NULL
);
CREATE INDEX memories_scope ON memories (tenant_id, user_id, superseded_at, id);
CREATE INDEX memories_list ON memories (tenant_id, id);
CREATE INDEX memories_version ON memories (tenant_id, user_id, version);
CREATE INDEX memories_profile ON memories (tenant_id, user_id, key) WHERE kind = 'profile';

-- Full-text index over memories; language-neutral tokenizer, diacritics folded.
CREATE VIRTUAL TABLE memories_fts USING fts5 (
    content, content = 'memories', content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, content) VALUES (new.rowid, new.content);
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;

CREATE TABLE memory_events (
    id         INTEGER PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    memory_id  TEXT NOT NULL,
    event      TEXT NOT NULL,
    related_id TEXT,
    actor      TEXT NOT NULL,
    detail     TEXT NOT NULL DEFAULT '{}',
    at         INTEGER NOT NULL
);
CREATE INDEX memory_events_memory ON memory_events (tenant_id, memory_id);
CREATE INDEX memory_events_user ON memory_events (tenant_id, user_id);

-- Per-user change counter; a purge leaves a tombstone so caches drop the row.
CREATE TABLE user_versions (
    tenant_id TEXT NOT NULL,
    user_id   TEXT NOT NULL,
    version   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);
CREATE TABLE memory_tombstones (
    tenant_id TEXT NOT NULL,
    user_id   TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    version   INTEGER NOT NULL
);
CREATE INDEX memory_tombstones_user ON memory_tombstones (tenant_id, user_id, version);

CREATE TABLE conversations (
    tenant_id  TEXT NOT NULL,
    id         TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    agent_id   TEXT,
    last_seq   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX conversations_user ON conversations (tenant_id, user_id);

CREATE TABLE messages (
    rowid           INTEGER PRIMARY KEY,
    id              TEXT NOT NULL UNIQUE,
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
    UNIQUE (tenant_id, conversation_id, seq)
);
CREATE INDEX messages_user ON messages (tenant_id, user_id);
CREATE INDEX messages_turn ON messages (tenant_id, turn_id);

CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content, tool_name, content = 'messages', content_rowid = 'rowid',
    tokenize = 'unicode61 remove_diacritics 2'
);
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

-- Summary DAG (leaf → branch → root) with links to sources; filled by the workers.
CREATE TABLE summaries (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
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
    created_at      INTEGER NOT NULL
);
CREATE INDEX summaries_user ON summaries (tenant_id, user_id);
CREATE TABLE summary_sources (
    tenant_id  TEXT NOT NULL,
    summary_id TEXT NOT NULL,
    source_id  TEXT NOT NULL,
    ordinal    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, summary_id, source_id)
);

-- Durable background jobs: claimed with an expiring lease, deduplicated by key.
CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    tenant_id    TEXT NOT NULL,
    user_id      TEXT,
    kind         TEXT NOT NULL,
    dedup_key    TEXT,
    payload      TEXT NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 3,
    run_after    INTEGER NOT NULL,
    lease_until  INTEGER,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX jobs_claim ON jobs (status, run_after);
CREATE INDEX jobs_user ON jobs (tenant_id, user_id);
CREATE UNIQUE INDEX jobs_dedup ON jobs (tenant_id, dedup_key) WHERE dedup_key IS NOT NULL AND status IN ('pending', 'running');

-- Content-hash cursor of the extractor, per conversation.
CREATE TABLE extraction_cursors (
    tenant_id       TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    last_hash       TEXT NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, conversation_id)
);

-- Which memories a search/context call returned, keyed by the caller's turn id.
CREATE TABLE recalls (
    tenant_id  TEXT NOT NULL,
    turn_id    TEXT NOT NULL,
    memory_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, turn_id, memory_id)
);
CREATE INDEX recalls_user ON recalls (tenant_id, user_id);

-- Context blocks kept stable for a session.
CREATE TABLE context_sessions (
    tenant_id  TEXT NOT NULL,
    session_id TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    pool       TEXT NOT NULL DEFAULT '',
    text       TEXT NOT NULL,
    memory_ids TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, session_id, user_id, pool)
);
