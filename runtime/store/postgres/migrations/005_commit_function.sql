-- A commit is one call of trellis_commit: PL/pgSQL keeps the plans of its
-- statements for the session, so a commit is not planned again each time,
-- with nothing prepared by the client (it works behind PgBouncer). The
-- thread's head moves only if it is still the checkpoint's parent (or the
-- thread is new); only then are the checkpoint and its writes inserted.
-- It returns 1 when the head moved, else 0.
CREATE FUNCTION trellis_commit(
    p_thread text, p_seq bigint, p_parent bigint, p_at bigint, p_run text, p_step integer, p_source text,
    p_meta jsonb, p_fields text[], p_versions bigint[], p_appends boolean[], p_values text[])
RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    IF p_parent = 0 THEN
        INSERT INTO threads (id, head, created_at, updated_at) VALUES (p_thread, p_seq, p_at, p_at)
            ON CONFLICT (id) DO NOTHING;
    ELSE
        UPDATE threads SET head = p_seq, updated_at = p_at WHERE id = p_thread AND head = p_parent;
    END IF;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta)
        VALUES (p_thread, p_seq, p_parent, p_run, p_step, p_source, p_at, p_meta);
    INSERT INTO writes (thread, seq, field, version, append, value)
        SELECT p_thread, p_seq, u.f, u.v, u.a, u.val::jsonb
        FROM unnest(p_fields, p_versions, p_appends, p_values) AS u(f, v, a, val);
    DELETE FROM pending WHERE thread = p_thread AND parent < p_seq;
    RETURN 1;
END
$$;
