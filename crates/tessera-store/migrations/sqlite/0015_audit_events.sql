-- Issue 29: every change made through the admin API (or the console, which calls it), kept
-- for the activity page and GET /admin/v1/audit-events: who, what, to what, when, from
-- where. Pruned by age and count (housekeeping).
CREATE TABLE audit_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      INTEGER NOT NULL,              -- seconds since the epoch
    actor   TEXT NOT NULL,                 -- the admin client's id
    action  TEXT NOT NULL,                 -- created, updated, deleted, rotated secret, …
    object  TEXT NOT NULL,                 -- plan:NAME, client:ID, key:KID, trust-policy:NAME
    source  TEXT NOT NULL DEFAULT '',      -- the caller's address
    channel TEXT NOT NULL DEFAULT ''       -- admin-api or console
) STRICT;

CREATE INDEX audit_events_at ON audit_events (at);
