-- Issue 27: plans limit the requests their clients make to each API, and the APIs report
-- back the requests they served.

-- A plan's limits by API, as a JSON object: {"news-api": {"rate": [5, 60, 5],
-- "quota": [1000, "day"]}} (rate: count, period in seconds, burst; quota: count, "day" or
-- "month"); '{}' limits nothing.
ALTER TABLE plans ADD COLUMN api_limits TEXT NOT NULL DEFAULT '{}';

-- Requests per client, API and UTC day, as the APIs reported them (`POST /api-usage`),
-- added to and never overwritten.
CREATE TABLE api_usage (
    client_id TEXT NOT NULL,
    day       TEXT NOT NULL,               -- YYYY-MM-DD, UTC
    api       TEXT NOT NULL,
    requests  INTEGER NOT NULL DEFAULT 0,
    refused   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (client_id, day, api)
) STRICT;

-- The report batches already counted, so that a batch sent again counts once; pruned after
-- a few days.
CREATE TABLE api_usage_batches (
    batch       TEXT PRIMARY KEY NOT NULL,
    received_at INTEGER NOT NULL
) STRICT;
