-- Every change to a plan, client or signing key, numbered in commit order, so that a running
-- server applies each change to the registry it holds instead of reloading all of it
-- (Store::changes_since). Triggers write it in the transaction of the change, so that no
-- write path can leave it out.
CREATE TABLE changes (
    seq  BIGSERIAL PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('plan', 'client', 'key')),
    id   TEXT NOT NULL                     -- plans.name, clients.id or signing_keys.kid
);

-- The highest number pruned: a reader that had not read that far has missed changes.
CREATE TABLE changes_pruned (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    through BIGINT NOT NULL
);
INSERT INTO changes_pruned (id, through) VALUES (1, 0);

-- Sequence values are drawn at insert and may commit out of order: a reader could see 8
-- before 7 commits and then never read 7. So every transaction that changes the registry
-- takes this lock before it draws a number, and holds it until it commits: numbers are
-- drawn and committed one transaction after another. The revision trigger takes it too,
-- before the revision row, so that the two locks are always taken in the same order.
CREATE FUNCTION tessera_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    change_kind TEXT := TG_ARGV[0];
    key_column TEXT := TG_ARGV[1];
BEGIN
    PERFORM pg_advisory_xact_lock(7289504520);
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO changes (kind, id) VALUES (change_kind, to_jsonb(NEW) ->> key_column);
    END IF;
    IF TG_OP = 'DELETE'
        OR (TG_OP = 'UPDATE' AND to_jsonb(OLD) ->> key_column <> to_jsonb(NEW) ->> key_column)
    THEN
        INSERT INTO changes (kind, id) VALUES (change_kind, to_jsonb(OLD) ->> key_column);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION tessera_bump_revision() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(7289504520);
    UPDATE revision SET value = value + 1 WHERE id = 1;
    RETURN NULL;
END
$$;

CREATE TRIGGER plans_change AFTER INSERT OR UPDATE OR DELETE ON plans
    FOR EACH ROW EXECUTE FUNCTION tessera_log_change('plan', 'name');
CREATE TRIGGER clients_change AFTER INSERT OR UPDATE OR DELETE ON clients
    FOR EACH ROW EXECUTE FUNCTION tessera_log_change('client', 'id');
CREATE TRIGGER keys_change AFTER INSERT OR UPDATE OR DELETE ON signing_keys
    FOR EACH ROW EXECUTE FUNCTION tessera_log_change('key', 'kid');
