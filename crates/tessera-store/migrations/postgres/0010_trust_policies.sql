-- As migrations/sqlite/0012_trust_policies.sql: workload identity federation.
CREATE TABLE trust_policies (
    name              TEXT PRIMARY KEY NOT NULL,
    client_id         TEXT NOT NULL REFERENCES clients(id) ON DELETE CASCADE,
    issuer            TEXT NOT NULL,
    jwks_uri          TEXT,
    audience          TEXT NOT NULL,
    subject           TEXT NOT NULL,
    claims            TEXT NOT NULL,
    max_assertion_ttl BIGINT,
    created_at        BIGINT NOT NULL
);
CREATE INDEX trust_policies_client ON trust_policies (client_id);
