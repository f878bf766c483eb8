-- 0031_claim_token, as the SQLite store's 0032: a claim remembers the
-- token whose request took or last renewed it, so that revoking that
-- token releases the claim. NULL when unclaimed or claimed without a
-- stored token.
ALTER TABLE queue ADD COLUMN claim_token_id TEXT;
