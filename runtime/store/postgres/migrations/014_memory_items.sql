-- What flows remember across threads (store.Memory): JSON documents by
-- tenant, namespace (its names each followed by U+001F, compared byte by
-- byte, so a prefix is a range of the key) and key. body holds the words
-- of the document's strings; search is their tsvector, under a GIN index.
-- Times are Unix nanoseconds, 0 for none.
CREATE TABLE memory_items (
    tenant     text NOT NULL,
    namespace  text COLLATE "C" NOT NULL,
    key        text NOT NULL,
    value      text NOT NULL,
    body       text NOT NULL,
    search     tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, body)) STORED,
    updated_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (tenant, namespace, key)
);
CREATE INDEX memory_items_search ON memory_items USING gin (search);
CREATE INDEX memory_items_recent ON memory_items (tenant, updated_at);
CREATE INDEX memory_items_expiry ON memory_items (expires_at) WHERE expires_at <> 0;
