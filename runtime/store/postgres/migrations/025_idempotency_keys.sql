-- The idempotency keys of the API's creating requests (store.Requests):
-- the first request of a tenant's key, what it asked (fingerprint), the
-- id of what it creates (ref), the thread it is about (a store key, ''
-- for none), who handles it until when (owner, locked_until), and once
-- answered its answer (status 0: none yet). Times are Unix nanoseconds.
CREATE TABLE idempotency_keys (
    tenant       text NOT NULL,
    key          text NOT NULL,
    fingerprint  text NOT NULL,
    ref          text NOT NULL,
    thread       text NOT NULL,
    owner        text NOT NULL,
    locked_until bigint NOT NULL,
    status       integer NOT NULL,
    body         bytea NOT NULL,
    created_at   bigint NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
CREATE INDEX idempotency_keys_thread ON idempotency_keys (thread) WHERE thread <> '';

-- A thread's keys go with its record, however it is deleted
-- (trellis_delete_thread, trellis_prune_idle, the catalog's
-- DeleteThread): an answer may hold its state.
CREATE FUNCTION trellis_forget_thread_requests() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM idempotency_keys WHERE thread = OLD.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER idempotency_keys_thread_gone AFTER DELETE ON api_threads
    FOR EACH ROW EXECUTE FUNCTION trellis_forget_thread_requests();
