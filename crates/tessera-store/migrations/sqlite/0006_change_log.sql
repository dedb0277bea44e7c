-- Every change to a plan, client or signing key, numbered in commit order, so that a running
-- server applies each change to the registry it holds instead of reloading all of it
-- (Store::changes_since). Triggers write it in the transaction of the change, so that no
-- write path can leave it out. AUTOINCREMENT: a number is never reused after a prune, and
-- SQLite's one writer at a time commits in number order.
CREATE TABLE changes (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('plan', 'client', 'key')),
    id   TEXT NOT NULL                     -- plans.name, clients.id or signing_keys.kid
) STRICT;

-- The highest number pruned: a reader that had not read that far has missed changes.
CREATE TABLE changes_pruned (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    through INTEGER NOT NULL
) STRICT;
INSERT INTO changes_pruned (id, through) VALUES (1, 0);

CREATE TRIGGER plans_change_ins AFTER INSERT ON plans
BEGIN INSERT INTO changes (kind, id) VALUES ('plan', NEW.name); END;
CREATE TRIGGER plans_change_upd AFTER UPDATE ON plans
BEGIN
    INSERT INTO changes (kind, id) VALUES ('plan', NEW.name);
    INSERT INTO changes (kind, id) SELECT 'plan', OLD.name WHERE OLD.name <> NEW.name;
END;
CREATE TRIGGER plans_change_del AFTER DELETE ON plans
BEGIN INSERT INTO changes (kind, id) VALUES ('plan', OLD.name); END;

CREATE TRIGGER clients_change_ins AFTER INSERT ON clients
BEGIN INSERT INTO changes (kind, id) VALUES ('client', NEW.id); END;
CREATE TRIGGER clients_change_upd AFTER UPDATE ON clients
BEGIN
    INSERT INTO changes (kind, id) VALUES ('client', NEW.id);
    INSERT INTO changes (kind, id) SELECT 'client', OLD.id WHERE OLD.id <> NEW.id;
END;
CREATE TRIGGER clients_change_del AFTER DELETE ON clients
BEGIN INSERT INTO changes (kind, id) VALUES ('client', OLD.id); END;

CREATE TRIGGER keys_change_ins AFTER INSERT ON signing_keys
BEGIN INSERT INTO changes (kind, id) VALUES ('key', NEW.kid); END;
CREATE TRIGGER keys_change_upd AFTER UPDATE ON signing_keys
BEGIN
    INSERT INTO changes (kind, id) VALUES ('key', NEW.kid);
    INSERT INTO changes (kind, id) SELECT 'key', OLD.kid WHERE OLD.kid <> NEW.kid;
END;
CREATE TRIGGER keys_change_del AFTER DELETE ON signing_keys
BEGIN INSERT INTO changes (kind, id) VALUES ('key', OLD.kid); END;
