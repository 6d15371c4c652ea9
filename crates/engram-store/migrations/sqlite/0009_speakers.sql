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
-- Messages appended before this version: the text before the first ": " when it is short,
-- starts with an ASCII capital and has at most two spaces. Readers keep only the names
-- that pass `label` (a row that does not is ignored).
INSERT OR IGNORE INTO speakers (tenant_id, user_id, name)
SELECT tenant_id, user_id, substr(content, 1, instr(content, ': ') - 1)
FROM messages
WHERE instr(content, ': ') BETWEEN 2 AND 41
  AND substr(content, 1, 1) BETWEEN 'A' AND 'Z'
  AND length(substr(content, 1, instr(content, ': ') - 1))
      - length(replace(substr(content, 1, instr(content, ': ') - 1), ' ', '')) <= 2;
