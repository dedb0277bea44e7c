-- Revocations are read incrementally by sequence; they no longer reload the whole registry.
DROP TRIGGER revoked_revision ON revoked_tokens;
ALTER TABLE revoked_tokens ADD COLUMN seq BIGSERIAL;
CREATE INDEX revoked_tokens_seq ON revoked_tokens (seq);

-- Check values, such as the one that ties this database to its master key.
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value BYTEA NOT NULL
);
