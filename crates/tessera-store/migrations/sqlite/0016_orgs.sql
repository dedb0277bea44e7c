-- Issue 28: organizations, the customers that hold clients and a plan.
CREATE TABLE orgs (
    id         TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL,
    plan       TEXT NOT NULL REFERENCES plans(name),
    enabled    INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- A client's organization, if any. Its plan column then holds the organization's plan and
-- org_enabled whether the organization is enabled: both are written in the transaction
-- that changes the organization, so that the change reaches every instance through the
-- clients' change log (0006) as any client change does.
ALTER TABLE clients ADD COLUMN org_id TEXT REFERENCES orgs(id);
ALTER TABLE clients ADD COLUMN org_enabled INTEGER NOT NULL DEFAULT 1 CHECK (org_enabled IN (0, 1));
CREATE INDEX clients_by_org ON clients (org_id) WHERE org_id IS NOT NULL;

-- Whether a plan's token rate and API limits are each client's or shared by all the
-- clients of an organization.
ALTER TABLE plans ADD COLUMN limit_per TEXT NOT NULL DEFAULT 'client' CHECK (limit_per IN ('client', 'org'));
