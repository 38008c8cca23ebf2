-- A thread's deletion (and so an idle prune, which deletes through this
-- function) finds its runs first, then deletes their events and packs by
-- the runs' ids: joined to the runs instead, a planner whose statistics
-- lag behind the events' growth (a table of events filling under load)
-- scanned every event of every run, each deletion taking as long as the
-- whole table; by id, it reads the runs' own rows through the key.
CREATE OR REPLACE FUNCTION trellis_delete_thread(p_thread text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    ids text[];
    runs text[];
    deliveries text[];
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
    runs := ARRAY(SELECT id FROM api_runs WHERE thread = p_thread);
    IF cardinality(runs) > 0 THEN
        DELETE FROM api_event_packs WHERE run = ANY (runs);
        DELETE FROM api_events WHERE run = ANY (runs);
        DELETE FROM api_runs WHERE id = ANY (runs);
    END IF;
    DELETE FROM voice_sessions WHERE thread = p_thread;
    deliveries := ARRAY(SELECT id FROM webhook_deliveries WHERE thread = p_thread);
    IF cardinality(deliveries) > 0 THEN
        DELETE FROM webhook_attempts WHERE delivery = ANY (deliveries);
        DELETE FROM webhook_deliveries WHERE id = ANY (deliveries);
    END IF;
    DELETE FROM schedules WHERE thread = p_thread;
    DELETE FROM thread_versions WHERE thread = ANY (ids);
    DELETE FROM api_threads WHERE id = p_thread;
    GET DIAGNOSTICS record_gone = ROW_COUNT;
    IF checkpoints_gone = 0 AND record_gone = 0 THEN
        RETURN 1;
    END IF;
    RETURN 0;
END
$$;
