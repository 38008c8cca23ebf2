-- Webhook deliveries (store.Webhooks): one per run that names a webhook,
-- due once its run has ended; a server claims one until claimed_until
-- (by the store's clock), sends it and records the attempt in
-- webhook_attempts. Times are Unix nanoseconds, durations nanoseconds.
CREATE TABLE webhook_deliveries (
    id            text PRIMARY KEY,
    tenant        text NOT NULL,
    thread        text NOT NULL,
    run           text NOT NULL,
    url           text NOT NULL,
    status        text NOT NULL,
    attempts      bigint NOT NULL,
    next_at       bigint NOT NULL,
    claimed_by    text NOT NULL,
    claimed_until bigint NOT NULL,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_at);
CREATE INDEX webhook_deliveries_run ON webhook_deliveries (run);
CREATE INDEX webhook_deliveries_thread ON webhook_deliveries (thread);

CREATE TABLE webhook_attempts (
    delivery text NOT NULL,
    n        bigint NOT NULL,
    at       bigint NOT NULL,
    server   text NOT NULL,
    status   bigint NOT NULL,
    error    text NOT NULL,
    took     bigint NOT NULL,
    PRIMARY KEY (delivery, n)
);
