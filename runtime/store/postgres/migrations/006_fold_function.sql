-- What recording a fold at checkpoint p_seq starts from, in one call whose
-- plans the session keeps (planning the two queries took longer than
-- running them): the newest fold before p_seq (prev 0 and spans NULL when
-- there is none) and the keys of the rows written after that fold up to
-- p_seq, by field, then sequence.
CREATE FUNCTION trellis_fold_since(p_thread text, p_seq bigint,
    OUT prev bigint, OUT spans text, OUT fields text[], OUT seqs bigint[], OUT appends boolean[])
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT f.seq, f.spans INTO prev, spans
        FROM folds f WHERE f.thread = p_thread AND f.seq < p_seq ORDER BY f.seq DESC LIMIT 1;
    prev := coalesce(prev, 0);
    SELECT coalesce(array_agg(w.field ORDER BY w.field, w.seq), '{}'),
           coalesce(array_agg(w.seq ORDER BY w.field, w.seq), '{}'),
           coalesce(array_agg(w.append ORDER BY w.field, w.seq), '{}')
        INTO fields, seqs, appends
        FROM writes w WHERE w.thread = p_thread AND w.seq > prev AND w.seq <= p_seq;
END
$$;
