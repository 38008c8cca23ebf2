-- A row of api_events holds a batch's consecutive events (a step's), not
-- one: first_seq is the number of its first event, seq of its last, and
-- data their data joined by newlines (an event as the engine encodes it
-- holds none). A row whose first_seq is NULL holds the one event seq, its
-- data as it is: every row recorded before.
ALTER TABLE api_events ADD COLUMN first_seq bigint;

-- A run's events recorded by one call as rows (p_firsts: each row's first
-- event, 0 for a row of one; p_seqs: its last; p_data), with their
-- notification: only while p_holder runs the run (its record held against
-- an adoption until the transaction ends), and only if no row of the run
-- holds an event numbered from the batch's first on (a run's events are
-- appended in order, once). It returns 1 when they are recorded, 0 when
-- the holder no longer runs the run, -1 when a number is taken.
CREATE FUNCTION trellis_append_event_rows(
    p_run text, p_holder text, p_firsts bigint[], p_seqs bigint[], p_data text[], p_channel text, p_payload text)
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM api_runs WHERE id = p_run AND server = p_holder AND status = 'running' FOR SHARE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF EXISTS (SELECT 1 FROM api_events WHERE run = p_run
            AND seq >= (SELECT min(coalesce(nullif(f, 0), s)) FROM unnest(p_firsts, p_seqs) AS u(f, s))) THEN
        RETURN -1;
    END IF;
    INSERT INTO api_events (run, first_seq, seq, data)
        SELECT p_run, nullif(f, 0), s, d FROM unnest(p_firsts, p_seqs, p_data) AS u(f, s, d);
    IF p_channel <> '' THEN
        PERFORM pg_notify(p_channel, p_payload);
    END IF;
    RETURN 1;
END
$$;

-- trellis_commit_events (migration 024), its events as rows
-- (trellis_append_event_rows).
CREATE FUNCTION trellis_commit_event_rows(
    p_thread text, p_seq bigint, p_parent bigint, p_at bigint, p_run text, p_step integer, p_source text,
    p_meta bytea, p_writes bytea,
    p_event_run text, p_firsts bigint[], p_seqs bigint[], p_data text[], p_holder text, p_channel text, p_payload text,
    p_release text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    recorded integer := 0;
BEGIN
    IF trellis_commit(p_thread, p_seq, p_parent, p_at, p_run, p_step, p_source, p_meta, p_writes) = 0 THEN
        RETURN 0;
    END IF;
    IF cardinality(p_seqs) > 0 THEN
        recorded := trellis_append_event_rows(p_event_run, p_holder, p_firsts, p_seqs, p_data, p_channel, p_payload);
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

-- trellis_pack_events (migration 035), a run's row that holds the event
-- p_throughs' entry names and events after it (a pack through an event
-- inside a row) left with the events after it alone.
CREATE OR REPLACE FUNCTION trellis_pack_events(p_runs text[], p_lasts bigint[], p_counts integer[], p_data bytea[], p_throughs bigint[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    packed integer := 0;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_runs), 0) LOOP
        UPDATE api_runs SET events_packed = true WHERE id = p_runs[i] AND NOT events_packed
            AND status IN ('succeeded', 'failed', 'cancelled');
        CONTINUE WHEN NOT FOUND;
        IF p_data[i] IS NOT NULL THEN
            INSERT INTO api_event_packs (run, last, count, data) VALUES (p_runs[i], p_lasts[i], p_counts[i], p_data[i]);
        END IF;
        DELETE FROM api_events WHERE run = p_runs[i] AND seq <= p_throughs[i];
        UPDATE api_events
            SET data = array_to_string((string_to_array(data, E'\n'))[p_throughs[i] - first_seq + 2 :], E'\n'),
                first_seq = nullif(p_throughs[i] + 1, seq)
            WHERE run = p_runs[i] AND seq > p_throughs[i] AND first_seq <= p_throughs[i];
        packed := packed + 1;
    END LOOP;
    RETURN packed;
END
$$;
