-- Revocations are read incrementally by sequence number. A rowid is reused once the highest
-- rows are pruned, so a reader that had seen the pruned number would miss the next
-- revocation: number them with AUTOINCREMENT, which never reuses a number.
CREATE TABLE revoked_tokens_seq (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    jti       TEXT NOT NULL UNIQUE,
    client_id TEXT NOT NULL,
    exp       INTEGER NOT NULL
) STRICT;
INSERT INTO revoked_tokens_seq (seq, jti, client_id, exp)
    SELECT rowid, jti, client_id, exp FROM revoked_tokens ORDER BY rowid;
DROP TABLE revoked_tokens;
ALTER TABLE revoked_tokens_seq RENAME TO revoked_tokens;
