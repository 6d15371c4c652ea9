-- The speakers of a user's transcripts (issue 13): the `Name: ` labels that open messages
-- of conversations between several people (`engram_core::speaker::label`), recorded when a
-- message is appended, so that search can tell a speaker's name from the topic of a query
-- without reading the user's messages. Erased with the user.
CREATE TABLE speakers (
    tenant_id TEXT NOT NULL,
    user_id   TEXT NOT NULL,
    name      TEXT NOT NULL,
    PRIMARY KEY (tenant_id, user_id, name)
);
-- Messages appended before this version: up to three words before the first ": ", the
-- first letter of each neither lower case, a digit nor punctuation (character classes
-- follow the database's locale, so a non-ASCII capital passes under any of them). Readers
-- keep only the names that pass `label`.
INSERT INTO speakers (tenant_id, user_id, name)
SELECT DISTINCT tenant_id, user_id, substring(content from '^([^:]{1,40}): ')
FROM messages
WHERE content ~ '^[^[:space:][:lower:][:digit:][:punct:]][^[:space:]:]*( [^[:space:][:lower:][:digit:][:punct:]][^[:space:]:]*){0,2}: '
ON CONFLICT DO NOTHING;
