-- Document frequencies of the memory index, used to drop query terms found in half the rows
-- or more (FTS5 gives them an IDF of 1e-6: they only add noise to the ranking).
CREATE VIRTUAL TABLE memories_fts_vocab USING fts5vocab (memories_fts, 'row');
CREATE VIRTUAL TABLE messages_fts_vocab USING fts5vocab (messages_fts, 'row');
