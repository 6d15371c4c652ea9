-- Keep a memory's vector in its row. With the default toast_tuple_target (~2 kB) a row
-- with a 384-dimension vector (1.5 kB) plus its text and tsvector is just over the limit,
-- so PostgreSQL moved the (incompressible) vector to the TOAST table: an exact scan of a
-- user's scope then read ~3.6 buffers per row (heap, TOAST index, TOAST heap) and
-- de-toasted every vector twice. With 8160 (the maximum) a row is only toasted when it does
-- not fit in a page (e.g. 3072-dimension vectors), as before. Applies to rows written from
-- now on; existing rows keep their TOAST pointers until they are written again.
ALTER TABLE memories SET (toast_tuple_target = 8160);
