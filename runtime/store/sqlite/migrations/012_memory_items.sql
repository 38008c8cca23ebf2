-- What flows remember across threads (store.Memory): JSON documents by
-- tenant, namespace (its names each followed by U+001F, so a prefix is a
-- range) and key. body holds the words of the document's strings, which
-- the FTS5 table memory_fts indexes (an external-content table the
-- triggers keep in step). Times are Unix nanoseconds, 0 for none.
CREATE TABLE memory_items (
    id         INTEGER PRIMARY KEY,
    tenant     TEXT NOT NULL,
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    body       TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    UNIQUE (tenant, namespace, key)
);
CREATE INDEX memory_items_recent ON memory_items (tenant, updated_at);
CREATE INDEX memory_items_expiry ON memory_items (expires_at) WHERE expires_at <> 0;

CREATE VIRTUAL TABLE memory_fts USING fts5(
    body, content = 'memory_items', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 0'
);
CREATE TRIGGER memory_items_insert AFTER INSERT ON memory_items BEGIN
    INSERT INTO memory_fts (rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER memory_items_delete AFTER DELETE ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, body) VALUES ('delete', old.id, old.body);
END;
CREATE TRIGGER memory_items_update AFTER UPDATE ON memory_items BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, body) VALUES ('delete', old.id, old.body);
    INSERT INTO memory_fts (rowid, body) VALUES (new.id, new.body);
END;
