-- Plans: which scopes a client may request, and for how long its tokens live.
CREATE TABLE plans (
    name        TEXT PRIMARY KEY NOT NULL,
    scopes      TEXT NOT NULL,             -- space-separated scope names
    token_ttl   INTEGER NOT NULL CHECK (token_ttl > 0),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE clients (
    id                   TEXT PRIMARY KEY NOT NULL,
    plan                 TEXT NOT NULL REFERENCES plans(name),
    label                TEXT NOT NULL,
    secret_hash          BLOB NOT NULL,    -- HMAC-SHA-256 of the secret under the pepper
    previous_secret_hash BLOB,             -- still valid until previous_secret_expires_at
    previous_secret_expires_at INTEGER,
    auth_method          TEXT NOT NULL CHECK (auth_method IN ('client_secret_basic', 'client_secret_post')),
    enabled              INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
) STRICT;

CREATE TABLE signing_keys (
    kid            TEXT PRIMARY KEY NOT NULL,
    alg            TEXT NOT NULL,
    public_jwk     TEXT NOT NULL,          -- JSON, public parts only
    private_sealed BLOB NOT NULL,          -- PKCS#8, AES-256-GCM under the master key
    created_at     INTEGER NOT NULL,
    activates_at   INTEGER NOT NULL        -- published from created_at, signs from here on
) STRICT;

-- One counter that every change to the registry bumps, so that running servers notice a
-- change made by another process with one cheap query.
CREATE TABLE revision (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;
INSERT INTO revision (id, value) VALUES (1, 0);

CREATE TRIGGER plans_ins AFTER INSERT ON plans BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER plans_upd AFTER UPDATE ON plans BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER plans_del AFTER DELETE ON plans BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER clients_ins AFTER INSERT ON clients BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER clients_upd AFTER UPDATE ON clients BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER clients_del AFTER DELETE ON clients BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER keys_ins AFTER INSERT ON signing_keys BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER keys_upd AFTER UPDATE ON signing_keys BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER keys_del AFTER DELETE ON signing_keys BEGIN UPDATE revision SET value = value + 1; END;
