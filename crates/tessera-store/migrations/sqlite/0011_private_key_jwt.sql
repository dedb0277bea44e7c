-- Clients that authenticate with a JWT signed by their own key (private_key_jwt, RFC 7523
-- section 2.2): one more method, and where the keys are published (jwks_uri; inline keys use
-- the jwks column). SQLite cannot change a CHECK constraint in place, so the table is rebuilt
-- as in 0008, and its triggers (0001, 0006) with it.
CREATE TABLE clients_new (
    id                   TEXT PRIMARY KEY NOT NULL,
    plan                 TEXT NOT NULL REFERENCES plans(name),
    label                TEXT NOT NULL,
    secret_hash          BLOB NOT NULL,    -- HMAC-SHA-256 of the secret under the pepper
    previous_secret_hash BLOB,             -- still valid until previous_secret_expires_at
    previous_secret_expires_at INTEGER,
    auth_method          TEXT NOT NULL CHECK (auth_method IN ('client_secret_basic',
                         'client_secret_post', 'tls_client_auth', 'self_signed_tls_client_auth',
                         'private_key_jwt')),
    enabled              INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    tls_subject_dn       TEXT,             -- tls_client_auth: the subject DN, RFC 4514
    tls_san_dns          TEXT,             -- or a DNS name among the SANs
    tls_san_uri          TEXT,             -- or a URI (a SPIFFE ID) among the SANs
    jwks                 TEXT,             -- self_signed_tls_client_auth, private_key_jwt: a JWK Set
    jwks_uri             TEXT              -- private_key_jwt: where the client publishes its keys
) STRICT;
INSERT INTO clients_new (id, plan, label, secret_hash, previous_secret_hash,
    previous_secret_expires_at, auth_method, enabled, created_at, updated_at,
    tls_subject_dn, tls_san_dns, tls_san_uri, jwks)
SELECT id, plan, label, secret_hash, previous_secret_hash, previous_secret_expires_at,
    auth_method, enabled, created_at, updated_at, tls_subject_dn, tls_san_dns, tls_san_uri, jwks
FROM clients;
DROP TABLE clients;
ALTER TABLE clients_new RENAME TO clients;
-- The admin API pages a plan's clients, and a plan in use cannot be deleted.
CREATE INDEX clients_plan ON clients (plan, id);

CREATE TRIGGER clients_ins AFTER INSERT ON clients BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER clients_upd AFTER UPDATE ON clients BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER clients_del AFTER DELETE ON clients BEGIN UPDATE revision SET value = value + 1; END;
CREATE TRIGGER clients_change_ins AFTER INSERT ON clients
BEGIN INSERT INTO changes (kind, id) VALUES ('client', NEW.id); END;
CREATE TRIGGER clients_change_upd AFTER UPDATE ON clients
BEGIN
    INSERT INTO changes (kind, id) VALUES ('client', NEW.id);
    INSERT INTO changes (kind, id) SELECT 'client', OLD.id WHERE OLD.id <> NEW.id;
END;
CREATE TRIGGER clients_change_del AFTER DELETE ON clients
BEGIN INSERT INTO changes (kind, id) VALUES ('client', OLD.id); END;
