-- A thread's deletion (and so an idle prune, which deletes through this
-- function) takes its webhook deliveries with their attempts, the
-- schedules that start runs on it and its flow version (migrations 019
-- to 021), as sqlstore's DeleteThread does for the other SQL stores; the
-- versions of flows, shared by threads, stay.
CREATE OR REPLACE FUNCTION trellis_delete_thread(p_thread text) RETURNS integer LANGUAGE plpgsql AS $$
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
    DELETE FROM webhook_attempts WHERE delivery IN (SELECT id FROM webhook_deliveries WHERE thread = p_thread);
    DELETE FROM webhook_deliveries WHERE thread = p_thread;
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
