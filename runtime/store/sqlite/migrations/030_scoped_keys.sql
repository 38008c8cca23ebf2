-- A key may be narrowed to a scope (a studio's page: its tenant and the
-- flows, no key management), expire unless renewed (Unix nanoseconds, 0
-- never), and lapse with the server that made it (owner: its id in
-- api_servers; '' none).
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX api_keys_owner ON api_keys (owner) WHERE owner <> '';
