-- The days a message's own relative dates point to (issue 13): "three years ago", "last
-- summer", "yesterday", resolved against the message's `created_at` by
-- `engram_core::when::relative_spans` when the message is appended. One row per message
-- that names any, with the first and last day they cover (midnight UTC), so a query that
-- names a time finds a message that spoke of it however long after it was sent. Erased
-- with the user. Messages appended before this version are indexed by `engram backfill
-- dates`.
CREATE TABLE IF NOT EXISTS message_dates (
    tenant_id  TEXT NOT NULL,
    message_id uuid NOT NULL,
    user_id    TEXT NOT NULL,
    said_from  timestamptz NOT NULL,
    said_to    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, message_id)
);
CREATE INDEX IF NOT EXISTS message_dates_by_user ON message_dates (tenant_id, user_id, said_from);
