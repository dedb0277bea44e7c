-- As migrations/sqlite/0011_private_key_jwt.sql: private_key_jwt (RFC 7523 section 2.2) and
-- the URL of the client's keys.
ALTER TABLE clients DROP CONSTRAINT clients_auth_method_check;
ALTER TABLE clients ADD CONSTRAINT clients_auth_method_check CHECK (auth_method IN
    ('client_secret_basic', 'client_secret_post', 'tls_client_auth', 'self_signed_tls_client_auth',
     'private_key_jwt'));
ALTER TABLE clients ADD COLUMN jwks_uri TEXT;
