CREATE TABLE pending (
    thread TEXT NOT NULL,
    parent INTEGER NOT NULL,
    node   TEXT NOT NULL,
    writes TEXT NOT NULL,
    PRIMARY KEY (thread, parent, node)
);

CREATE TABLE leases (
    thread     TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at INTEGER NOT NULL
);
