-- Packing runs' events (store.Catalog.PackEvents) is one call for a
-- batch of runs, one round trip where each run took three statements:
-- for each run still ended and not packed, it is marked packed, its pack
-- inserted (a run whose events are all dropped has none: p_data's entry
-- is NULL) and its event rows up to p_throughs' entry deleted. It
-- returns how many runs it packed.
CREATE FUNCTION trellis_pack_events(p_runs text[], p_lasts bigint[], p_counts integer[], p_data bytea[], p_throughs bigint[])
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
        packed := packed + 1;
    END LOOP;
    RETURN packed;
END
$$;
