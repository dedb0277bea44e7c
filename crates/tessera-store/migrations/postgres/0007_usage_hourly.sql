-- As migrations/sqlite/0009_usage_hourly.sql.
CREATE TABLE usage_hourly (
    hour    TEXT PRIMARY KEY,
    issued  BIGINT NOT NULL DEFAULT 0,
    refused BIGINT NOT NULL DEFAULT 0
);
