-- The same schema as the SQLite backend (migrations/sqlite), in PostgreSQL's types: 64-bit
-- integers throughout, so that one row mapping serves both.

CREATE TABLE plans (
    name          TEXT PRIMARY KEY,
    scopes        TEXT NOT NULL,
    token_ttl     BIGINT NOT NULL CHECK (token_ttl > 0),
    rate_count    BIGINT CHECK (rate_count > 0),
    rate_period   BIGINT CHECK (rate_period > 0),
    rate_burst    BIGINT CHECK (rate_burst > 0),
    reuse_percent BIGINT CHECK (reuse_percent BETWEEN 1 AND 99),
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE clients (
    id                         TEXT PRIMARY KEY,
    plan                       TEXT NOT NULL REFERENCES plans(name),
    label                      TEXT NOT NULL,
    secret_hash                BYTEA NOT NULL,
    previous_secret_hash       BYTEA,
    previous_secret_expires_at BIGINT,
    auth_method                TEXT NOT NULL CHECK (auth_method IN ('client_secret_basic', 'client_secret_post')),
    enabled                    BOOLEAN NOT NULL,
    created_at                 BIGINT NOT NULL,
    updated_at                 BIGINT NOT NULL
);

CREATE TABLE signing_keys (
    kid            TEXT PRIMARY KEY,
    alg            TEXT NOT NULL,
    public_jwk     TEXT NOT NULL,
    private_sealed BYTEA NOT NULL,
    created_at     BIGINT NOT NULL,
    activates_at   BIGINT NOT NULL
);

CREATE TABLE revoked_tokens (
    jti       TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    exp       BIGINT NOT NULL
);

CREATE TABLE usage (
    client_id TEXT NOT NULL,
    day       TEXT NOT NULL,
    issued    BIGINT NOT NULL DEFAULT 0,
    refused   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (client_id, day)
);

-- Every change to the registry bumps one counter, which each running instance polls.
CREATE TABLE revision (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value BIGINT NOT NULL
);
INSERT INTO revision (id, value) VALUES (1, 0);

CREATE FUNCTION tessera_bump_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE revision SET value = value + 1 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER plans_revision AFTER INSERT OR UPDATE OR DELETE ON plans
    FOR EACH STATEMENT EXECUTE FUNCTION tessera_bump_revision();
CREATE TRIGGER clients_revision AFTER INSERT OR UPDATE OR DELETE ON clients
    FOR EACH STATEMENT EXECUTE FUNCTION tessera_bump_revision();
CREATE TRIGGER keys_revision AFTER INSERT OR UPDATE OR DELETE ON signing_keys
    FOR EACH STATEMENT EXECUTE FUNCTION tessera_bump_revision();
CREATE TRIGGER revoked_revision AFTER INSERT ON revoked_tokens
    FOR EACH STATEMENT EXECUTE FUNCTION tessera_bump_revision();
