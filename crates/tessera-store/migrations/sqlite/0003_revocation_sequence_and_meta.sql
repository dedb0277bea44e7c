-- Revocations are read incrementally by rowid; they no longer reload the whole registry.
DROP TRIGGER revoked_ins;

-- Check values, such as the one that ties this database to its master key.
CREATE TABLE meta (
    name  TEXT PRIMARY KEY NOT NULL,
    value BLOB NOT NULL
) STRICT;
