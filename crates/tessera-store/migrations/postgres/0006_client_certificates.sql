-- As migrations/sqlite/0008_client_certificates.sql: two more methods (RFC 8705) and what
-- the certificate must match.
ALTER TABLE clients DROP CONSTRAINT clients_auth_method_check;
ALTER TABLE clients ADD CONSTRAINT clients_auth_method_check CHECK (auth_method IN
    ('client_secret_basic', 'client_secret_post', 'tls_client_auth', 'self_signed_tls_client_auth'));
ALTER TABLE clients ADD COLUMN tls_subject_dn TEXT;
ALTER TABLE clients ADD COLUMN tls_san_dns TEXT;
ALTER TABLE clients ADD COLUMN tls_san_uri TEXT;
ALTER TABLE clients ADD COLUMN jwks TEXT;
CREATE INDEX clients_plan ON clients (plan, id);
