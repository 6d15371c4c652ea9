-- What a cached context block was chosen with (its token budget and minimum score): a call
-- that asks for another budget or threshold under the same session chooses again instead of
-- being served a block made for other terms.
ALTER TABLE context_sessions ADD COLUMN IF NOT EXISTS params jsonb;
