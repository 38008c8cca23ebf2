-- A run's events recorded by one call, with their notification: only
-- while p_holder runs the run (its record held against an adoption until
-- the transaction ends), and only if none of their numbers is taken. It
-- returns 1 when they are recorded, 0 when the holder no longer runs the
-- run, -1 when a number is taken. A function, so that its plans are
-- kept by the connection, where a statement would be planned each time.
CREATE FUNCTION trellis_append_events(
    p_run text, p_holder text, p_seqs bigint[], p_data text[], p_channel text, p_payload text)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM api_runs WHERE id = p_run AND server = p_holder AND status = 'running' FOR SHARE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF EXISTS (SELECT 1 FROM api_events WHERE run = p_run AND seq = ANY(p_seqs)) THEN
        RETURN -1;
    END IF;
    INSERT INTO api_events (run, seq, data) SELECT p_run, * FROM unnest(p_seqs, p_data);
    IF p_channel <> '' THEN
        PERFORM pg_notify(p_channel, p_payload);
    END IF;
    RETURN 1;
END
$$;

-- A checkpoint committed with its run's events (store.EventAppend) and
-- the release of its thread's lease (store.Checkpoint.Release):
-- trellis_commit, then, only if the thread's head moved,
-- trellis_append_events (when there are events) and the lease released
-- (when p_release names its owner). It returns trellis_commit's result,
-- plus 2 when the events were recorded.
CREATE FUNCTION trellis_commit_events(
    p_thread text, p_seq bigint, p_parent bigint, p_at bigint, p_run text, p_step integer, p_source text,
    p_meta bytea, p_writes bytea,
    p_event_run text, p_seqs bigint[], p_data text[], p_holder text, p_channel text, p_payload text,
    p_release text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    recorded integer := 0;
BEGIN
    IF trellis_commit(p_thread, p_seq, p_parent, p_at, p_run, p_step, p_source, p_meta, p_writes) = 0 THEN
        RETURN 0;
    END IF;
    IF cardinality(p_seqs) > 0 THEN
        recorded := trellis_append_events(p_event_run, p_holder, p_seqs, p_data, p_channel, p_payload);
    END IF;
    IF p_release <> '' THEN
        DELETE FROM leases WHERE thread = p_thread AND owner = p_release;
    END IF;
    IF recorded = 1 THEN
        RETURN 3;
    END IF;
    RETURN 1;
END
$$;
