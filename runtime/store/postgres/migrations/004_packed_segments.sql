-- Segments hold packed lists (see schema.Pack), which are binary. Segments
-- written before are JSON text and stay readable as its UTF-8 bytes.
ALTER TABLE segments ALTER COLUMN items TYPE bytea USING convert_to(items, 'UTF8');
