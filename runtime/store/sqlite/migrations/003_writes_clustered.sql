-- Field rows are read by thread and field in sequence order. Storing them
-- in their primary key's order (without a separate rowid table) keeps a
-- thread's rows for one field together on disk, so a cold read of a long
-- conversation scans neighbouring pages instead of jumping from the key
-- index to each row.
CREATE TABLE writes_clustered (
    thread  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    field   TEXT NOT NULL,
    version INTEGER NOT NULL,
    append  INTEGER NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (thread, field, seq),
    FOREIGN KEY (thread, seq) REFERENCES checkpoints (thread, seq) ON DELETE CASCADE
) WITHOUT ROWID;

INSERT INTO writes_clustered (thread, seq, field, version, append, value)
    SELECT thread, seq, field, version, append, value FROM writes;

DROP TABLE writes;
ALTER TABLE writes_clustered RENAME TO writes;
CREATE INDEX writes_seq ON writes (thread, seq);
