-- A voice session's caller identity belongs to the API key it was
-- admitted for: the key's id ('' for a session recorded before, whose
-- caller is nobody's).
ALTER TABLE voice_sessions ADD COLUMN caller_key text NOT NULL DEFAULT '';
