-- Webhook deliveries (store.Webhooks): one per run that names a webhook,
-- due once its run has ended; a server claims one until claimed_until
-- (by the store's clock), sends it and records the attempt in
-- webhook_attempts. Times are Unix nanoseconds, durations nanoseconds.
CREATE TABLE webhook_deliveries (
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    thread        TEXT NOT NULL,
    run           TEXT NOT NULL,
    url           TEXT NOT NULL,
    status        TEXT NOT NULL,
    attempts      INTEGER NOT NULL,
    next_at       INTEGER NOT NULL,
    claimed_by    TEXT NOT NULL,
    claimed_until INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_at);
CREATE INDEX webhook_deliveries_run ON webhook_deliveries (run);
CREATE INDEX webhook_deliveries_thread ON webhook_deliveries (thread);

CREATE TABLE webhook_attempts (
    delivery TEXT NOT NULL,
    n        INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    server   TEXT NOT NULL,
    status   INTEGER NOT NULL,
    error    TEXT NOT NULL,
    took     INTEGER NOT NULL,
    PRIMARY KEY (delivery, n)
) WITHOUT ROWID;
