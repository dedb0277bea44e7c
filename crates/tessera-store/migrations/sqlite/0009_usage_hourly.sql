-- Token requests of all clients per UTC hour, for the last day's chart; kept two days.
CREATE TABLE usage_hourly (
    hour    TEXT PRIMARY KEY NOT NULL,     -- YYYY-MM-DDTHH, UTC
    issued  INTEGER NOT NULL DEFAULT 0,
    refused INTEGER NOT NULL DEFAULT 0
) STRICT;
