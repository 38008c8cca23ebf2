-- The idempotency keys of the API's creating requests (store.Requests):
-- the first request of a tenant's key, what it asked (fingerprint), the
-- id of what it creates (ref), the thread it is about (a store key, ''
-- for none), who handles it until when (owner, locked_until), and once
-- answered its answer (status 0: none yet). Times are Unix nanoseconds.
CREATE TABLE idempotency_keys (
    tenant       TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    ref          TEXT NOT NULL,
    thread       TEXT NOT NULL,
    owner        TEXT NOT NULL,
    locked_until INTEGER NOT NULL,
    status       INTEGER NOT NULL,
    body         BLOB NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
CREATE INDEX idempotency_keys_thread ON idempotency_keys (thread) WHERE thread <> '';
-- A thread's keys go with its record, however it is deleted (an answer
-- may hold its state).
CREATE TRIGGER idempotency_keys_thread_gone AFTER DELETE ON api_threads
BEGIN
    DELETE FROM idempotency_keys WHERE thread = OLD.id;
END;
