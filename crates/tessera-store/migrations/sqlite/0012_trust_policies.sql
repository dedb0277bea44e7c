-- Workload identity federation: a trust policy lets tokens from an external issuer (a
-- Kubernetes cluster, GitHub Actions, a SPIFFE trust domain) authenticate as a client, when
-- their audience, subject (exact, or a prefix ending in '*') and required claims match.
CREATE TABLE trust_policies (
    name              TEXT PRIMARY KEY NOT NULL,
    client_id         TEXT NOT NULL REFERENCES clients(id) ON DELETE CASCADE,
    issuer            TEXT NOT NULL,
    jwks_uri          TEXT,             -- else found through the issuer's OIDC discovery
    audience          TEXT NOT NULL,
    subject           TEXT NOT NULL,
    claims            TEXT NOT NULL,    -- a JSON object of claim name -> required value
    max_assertion_ttl INTEGER,          -- seconds from iat (or now) to exp, at most
    created_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX trust_policies_client ON trust_policies (client_id);
