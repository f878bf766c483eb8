-- The organizations of the public fleet API an outpost was created for
-- (spec.allowed_org_ids), NULL when unset. Stored and returned, not
-- enforced.
ALTER TABLE outposts ADD COLUMN allowed_org_ids TEXT[];
