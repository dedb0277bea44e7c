-- Clients stored in id order (WITHOUT ROWID): the registry reads every client in id order,
-- at start and in each full reload, and through the primary key index of a rowid table
-- that was one random table page per client (a million clients: gigabytes copied from the
-- page cache). A table clustered by id is read in order, page after page. Rebuilt as in 0011,
-- with its triggers (0001, 0006).
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
) STRICT, WITHOUT ROWID;
INSERT INTO clients_new SELECT * FROM clients ORDER BY id;
-- With foreign keys on, DROP TABLE deletes every row first, and trust_policies' ON DELETE
-- CASCADE (0012) would take the policies with them; they are kept aside meanwhile. (The
-- implicit delete fires no trigger, so the change log is untouched.)
CREATE TEMP TABLE trust_policies_kept AS SELECT * FROM trust_policies;
DROP TABLE clients;
ALTER TABLE clients_new RENAME TO clients;
INSERT INTO trust_policies SELECT * FROM trust_policies_kept;
DROP TABLE trust_policies_kept;
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
