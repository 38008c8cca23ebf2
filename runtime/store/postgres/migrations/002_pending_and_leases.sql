CREATE TABLE pending (
    thread text NOT NULL,
    parent bigint NOT NULL,
    node   text NOT NULL,
    writes jsonb NOT NULL,
    PRIMARY KEY (thread, parent, node)
);

CREATE TABLE leases (
    thread     text PRIMARY KEY,
    owner      text NOT NULL,
    expires_at bigint NOT NULL
);
