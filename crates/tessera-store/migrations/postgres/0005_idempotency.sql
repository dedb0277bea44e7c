-- As migrations/sqlite/0007_idempotency.sql.
CREATE TABLE idempotent_answers (
    owner       TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint BYTEA NOT NULL,
    answer      BYTEA NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (owner, key)
);
