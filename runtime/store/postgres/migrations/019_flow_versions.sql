-- Flow versions (store.Versions): each file a version of a flow was
-- compiled from, kept once by the hash of its content; each version's
-- manifest (file name to hash, as JSON); and the version each thread
-- runs. Times are Unix nanoseconds.
CREATE TABLE flow_files (
    hash text PRIMARY KEY,
    data bytea NOT NULL
);

CREATE TABLE flow_versions (
    flow       text NOT NULL,
    version    text NOT NULL,
    path       text NOT NULL,
    manifest   text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (flow, version)
);
CREATE INDEX flow_versions_recent ON flow_versions (flow, created_at DESC);

CREATE TABLE thread_versions (
    thread  text PRIMARY KEY,
    tenant  text NOT NULL,
    flow    text NOT NULL,
    version text NOT NULL,
    since   bigint NOT NULL
);
CREATE INDEX thread_versions_flow ON thread_versions (tenant, flow, version, thread);

-- A thread's version is among what deleting it removes (and so what
-- pruning it does: trellis_prune_idle deletes through this function);
-- the versions of flows, shared by threads, are not.
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
    DELETE FROM thread_versions WHERE thread = ANY (ids);
    DELETE FROM api_threads WHERE id = p_thread;
    GET DIAGNOSTICS record_gone = ROW_COUNT;
    IF checkpoints_gone = 0 AND record_gone = 0 THEN
        RETURN 1;
    END IF;
    RETURN 0;
END
$$;
