-- A checkpoint's writes move into its row (sqlstore.EncodeWrites): a row
-- of their own for each write, keyed twice, took more room than most
-- values. They are a JSON list of [field, version, append, value] lists,
-- by field; '' for none.
ALTER TABLE checkpoints ADD COLUMN writes TEXT NOT NULL DEFAULT '';
UPDATE checkpoints SET writes = (
    SELECT json_group_array(json(x)) FROM (
        SELECT json_array(w.field, w.version, json(CASE WHEN w.append THEN 'true' ELSE 'false' END), json(w.value)) AS x
        FROM writes w WHERE w.thread = checkpoints.thread AND w.seq = checkpoints.seq ORDER BY w.field))
    WHERE EXISTS (SELECT 1 FROM writes w WHERE w.thread = checkpoints.thread AND w.seq = checkpoints.seq);
DROP TABLE writes;

-- Folds name the rows they read by field; a fold now also names the
-- checkpoints of each field's tail. The folds before do not, so they go,
-- with the segments only they refer to: a thread's next fold starts
-- afresh.
DELETE FROM folds;
DELETE FROM segments;
