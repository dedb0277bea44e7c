-- Per-plan token-request rate (GCRA: count per period, with a burst) and token reuse.
ALTER TABLE plans ADD COLUMN rate_count INTEGER CHECK (rate_count > 0);
ALTER TABLE plans ADD COLUMN rate_period INTEGER CHECK (rate_period > 0);
ALTER TABLE plans ADD COLUMN rate_burst INTEGER CHECK (rate_burst > 0);
-- Reuse the client's last token while more than this percentage of its life is left.
ALTER TABLE plans ADD COLUMN reuse_percent INTEGER CHECK (reuse_percent BETWEEN 1 AND 99);

-- Revoked tokens (RFC 7009), remembered until they would have expired anyway.
CREATE TABLE revoked_tokens (
    jti       TEXT PRIMARY KEY NOT NULL,
    client_id TEXT NOT NULL,
    exp       INTEGER NOT NULL
) STRICT;
CREATE TRIGGER revoked_ins AFTER INSERT ON revoked_tokens BEGIN UPDATE revision SET value = value + 1; END;

-- Token requests per client and UTC day, for metering. Written in batches, off the hot path.
CREATE TABLE usage (
    client_id TEXT NOT NULL,
    day       TEXT NOT NULL,               -- YYYY-MM-DD, UTC
    issued    INTEGER NOT NULL DEFAULT 0,
    refused   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (client_id, day)
) STRICT;
