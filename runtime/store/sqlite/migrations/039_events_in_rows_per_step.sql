-- A row of api_events holds a batch's consecutive events (a step's), not
-- one: first_seq is the number of its first event, seq of its last, and
-- data their data joined by newlines (an event as the engine encodes it
-- holds none). A row whose first_seq is NULL holds the one event seq, its
-- data as it is: every row recorded before.
ALTER TABLE api_events ADD COLUMN first_seq INTEGER;
