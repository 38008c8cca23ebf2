-- A checkpoint's writes move into its row (sqlstore.EncodeWrites): a row of its
-- own and two index entries for each write cost more than most values
-- (some 180 bytes a write, for values of 100). They are a JSON list of
-- [field, version, append, value] lists, by field, as bytea: text, not
-- jsonb, which is larger for small documents and is only ever read
-- whole. The checkpoint's metadata goes from jsonb to such text too.
ALTER TABLE checkpoints ADD COLUMN writes bytea NOT NULL DEFAULT '';
UPDATE checkpoints c SET writes = w.list
    FROM (SELECT thread, seq,
                 convert_to(json_agg(json_build_array(field, version, append, value) ORDER BY field)::text, 'UTF8') AS list
          FROM writes GROUP BY thread, seq) w
    WHERE w.thread = c.thread AND w.seq = c.seq;
ALTER TABLE checkpoints ALTER COLUMN writes DROP DEFAULT;
ALTER TABLE checkpoints ALTER COLUMN meta TYPE bytea USING convert_to(meta::text, 'UTF8');

DROP FUNCTION trellis_commit(text, bigint, bigint, bigint, text, integer, text, jsonb, text[], bigint[], boolean[], text[]);
DROP FUNCTION trellis_fold_since(text, bigint);
DROP TABLE writes;

-- Folds name the rows they read by field; a fold now also names the
-- checkpoints of each field's tail. The folds before do not, so they go,
-- with the segments only they refer to: a thread's next fold starts
-- afresh.
DELETE FROM folds;
DELETE FROM segments;

-- A commit (see migration 005): the thread's head moves only if it is
-- still the checkpoint's parent (or the thread is new); only then is the
-- checkpoint inserted. It returns 1 when the head moved, else 0.
CREATE FUNCTION trellis_commit(
    p_thread text, p_seq bigint, p_parent bigint, p_at bigint, p_run text, p_step integer, p_source text,
    p_meta bytea, p_writes bytea)
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
    INSERT INTO checkpoints (thread, seq, parent, run, step, source, at, meta, writes)
        VALUES (p_thread, p_seq, p_parent, p_run, p_step, p_source, p_at, p_meta, p_writes);
    DELETE FROM pending WHERE thread = p_thread AND parent < p_seq;
    RETURN 1;
END
$$;
