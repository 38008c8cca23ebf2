-- Deleting a thread (store.Store.Delete) is one call, one round trip:
-- under the thread's lock (the catalog's, LockThread), and not while it
-- has a queued or running run, everything the store keeps of it and of
-- the threads of its child flows (found by their root's id, the index of
-- migration 016, then by their prefix). It returns 0 when it deleted the
-- thread, 1 when there was nothing of it, 2 when it is busy. A table that
-- holds a thread's data is deleted from here, and in sqlstore's
-- DeleteThread for the other SQL stores.
CREATE FUNCTION trellis_delete_thread(p_thread text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    ids text[];
    checkpoints_gone integer;
    record_gone integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(p_thread));
    IF EXISTS (SELECT 1 FROM api_runs WHERE thread = p_thread AND status IN ('queued', 'running')) THEN
        RETURN 2;
    END IF;
    ids := array_prepend(p_thread, ARRAY(SELECT id FROM threads WHERE strpos(id, '|') > 0
        AND split_part(id, '|', 1) = split_part(p_thread, '|', 1) AND starts_with(id, p_thread || '|')));
    DELETE FROM checkpoints WHERE thread = ANY (ids);
    DELETE FROM folds WHERE thread = ANY (ids);
    DELETE FROM segments WHERE thread = ANY (ids);
    DELETE FROM pending WHERE thread = ANY (ids);
    DELETE FROM leases WHERE thread = ANY (ids);
    DELETE FROM threads WHERE id = ANY (ids);
    GET DIAGNOSTICS checkpoints_gone = ROW_COUNT;
    DELETE FROM api_event_packs WHERE run IN (SELECT id FROM api_runs WHERE thread = p_thread);
    DELETE FROM api_events WHERE run IN (SELECT id FROM api_runs WHERE thread = p_thread);
    DELETE FROM api_runs WHERE thread = p_thread;
    DELETE FROM voice_sessions WHERE thread = p_thread;
    DELETE FROM api_threads WHERE id = p_thread;
    GET DIAGNOSTICS record_gone = ROW_COUNT;
    IF checkpoints_gone = 0 AND record_gone = 0 THEN
        RETURN 1;
    END IF;
    RETURN 0;
END
$$;

-- Pruning idle threads (store.PruneIdleThreads) deletes several in one
-- call, in the order given: each as trellis_delete_thread does, under
-- its lease taken as a run takes it (a thread whose lease another holder
-- has is left, and a run asking for the lease meanwhile waits for this
-- transaction) and only if it was not written since p_cutoff (Unix
-- nanoseconds). It returns the threads it deleted.
CREATE FUNCTION trellis_prune_idle(p_threads text[], p_owner text, p_cutoff bigint)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    t text;
    now_ns bigint;
BEGIN
    FOREACH t IN ARRAY p_threads LOOP
        now_ns := (extract(epoch FROM clock_timestamp()) * 1e9)::bigint;
        INSERT INTO leases (thread, owner, expires_at) VALUES (t, p_owner, now_ns + 60000000000)
            ON CONFLICT (thread) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
            WHERE leases.owner = excluded.owner OR leases.expires_at < now_ns;
        CONTINUE WHEN NOT FOUND;
        IF EXISTS (SELECT 1 FROM threads WHERE id = t AND updated_at < p_cutoff) AND trellis_delete_thread(t) = 0 THEN
            RETURN NEXT t;
        ELSE
            DELETE FROM leases WHERE thread = t AND owner = p_owner;
        END IF;
    END LOOP;
END
$$;
