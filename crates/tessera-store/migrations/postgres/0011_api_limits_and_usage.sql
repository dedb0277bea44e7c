-- As migrations/sqlite/0014_api_limits_and_usage.sql.
ALTER TABLE plans ADD COLUMN api_limits TEXT NOT NULL DEFAULT '{}';

CREATE TABLE api_usage (
    client_id TEXT NOT NULL,
    day       TEXT NOT NULL,
    api       TEXT NOT NULL,
    requests  BIGINT NOT NULL DEFAULT 0,
    refused   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (client_id, day, api)
);

CREATE TABLE api_usage_batches (
    batch       TEXT PRIMARY KEY,
    received_at BIGINT NOT NULL
);
