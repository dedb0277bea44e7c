-- A plan whose clients may introspect any token (RFC 7662 section 4); by default a client
-- learns the state of its own tokens only.
ALTER TABLE plans ADD COLUMN introspect_any BOOLEAN NOT NULL DEFAULT FALSE;
