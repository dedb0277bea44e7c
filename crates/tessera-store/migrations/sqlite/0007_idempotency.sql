-- Answers to admin requests that carried an Idempotency-Key, so that a retry gets the first
-- answer again instead of a second client. The answer holds a client secret: it is sealed
-- under the master key, and forgotten after a bounded time.
CREATE TABLE idempotent_answers (
    owner       TEXT NOT NULL,             -- the admin client that sent the request
    key         TEXT NOT NULL,             -- its Idempotency-Key
    fingerprint BLOB NOT NULL,             -- SHA-256 of the request, to refuse a reused key
    answer      BLOB NOT NULL,             -- the response body, AES-256-GCM under the master key
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (owner, key)
) STRICT;
