-- The full-text index (memory_fts) holds only the documents with words to
-- index: a document none of whose strings has a word, or one put
-- unindexed (store.MemoryItem.Unindexed), is stored with an empty body
-- and left out of it. Each put of such a document was an update of the
-- index (FTS5 writes a segment, its structure and its totals in every
-- transaction that changes it) for nothing a search could find. The
-- documents with an empty body indexed until now leave it first, as
-- their delete would have removed them.
INSERT INTO memory_fts (memory_fts, rowid, body) SELECT 'delete', id, body FROM memory_items WHERE body = '';
DROP TRIGGER memory_items_insert;
DROP TRIGGER memory_items_delete;
DROP TRIGGER memory_items_update;
CREATE TRIGGER memory_items_insert AFTER INSERT ON memory_items WHEN new.body <> '' BEGIN
    INSERT INTO memory_fts (rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER memory_items_delete AFTER DELETE ON memory_items WHEN old.body <> '' BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, body) VALUES ('delete', old.id, old.body);
END;
CREATE TRIGGER memory_items_update AFTER UPDATE ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, body) SELECT 'delete', old.id, old.body WHERE old.body <> '';
    INSERT INTO memory_fts (rowid, body) SELECT new.id, new.body WHERE new.body <> '';
END;
