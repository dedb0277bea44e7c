-- As migrations/sqlite/0016_orgs.sql.
CREATE TABLE orgs (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    plan       TEXT NOT NULL REFERENCES plans(name),
    enabled    BOOLEAN NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

ALTER TABLE clients ADD COLUMN org_id TEXT REFERENCES orgs(id);
ALTER TABLE clients ADD COLUMN org_enabled BOOLEAN NOT NULL DEFAULT TRUE;
CREATE INDEX clients_by_org ON clients (org_id) WHERE org_id IS NOT NULL;

ALTER TABLE plans ADD COLUMN limit_per TEXT NOT NULL DEFAULT 'client' CHECK (limit_per IN ('client', 'org'));
