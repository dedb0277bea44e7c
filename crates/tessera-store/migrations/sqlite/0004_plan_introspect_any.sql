-- A plan whose clients may introspect any token (RFC 7662 section 4); by default a client
-- learns the state of its own tokens only.
ALTER TABLE plans ADD COLUMN introspect_any INTEGER NOT NULL DEFAULT 0 CHECK (introspect_any IN (0, 1));
