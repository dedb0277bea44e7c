-- Whether a plan's clients bind their tokens to a DPoP key (RFC 9449): 'required' refuses a
-- token request without a proof, 'allowed' binds when a proof comes, 'off' ignores proofs.
ALTER TABLE plans ADD COLUMN dpop TEXT NOT NULL DEFAULT 'allowed' CHECK (dpop IN ('required', 'allowed', 'off'));
