-- A random number drawn when a user's counter row is created. Erasure deletes the row, so
-- the counter restarts; the incarnation tells caches of other processes that the user they
-- hold is gone, even when the new counter has climbed back to their version.
ALTER TABLE user_versions ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
