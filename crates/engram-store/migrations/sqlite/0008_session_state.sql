-- Working memory (issue 15, seeds 002 and 003): short-lived key-value state per (tenant,
-- user, agent, session), with an expiry. No agent is stored as '' (one address per entry).
-- Never embedded or indexed for search; erased with the user; expired rows are unreadable at
-- once and deleted by the workers' sweep.
CREATE TABLE session_state (
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    agent_id   TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, user_id, agent_id, session_id, key)
);
CREATE INDEX session_state_expiry ON session_state (expires_at);
