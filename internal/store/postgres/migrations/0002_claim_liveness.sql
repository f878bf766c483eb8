-- live_until: how long a claim holds on the strength of its connected
-- remote (NULL until one connects). A claim lapses at the later of
-- claim_deadline and live_until; the sweep finds lapsed claims by that.
ALTER TABLE queue ADD COLUMN live_until BIGINT;
DROP INDEX queue_phase_deadline;
CREATE INDEX queue_phase_expiry ON queue (phase, GREATEST(claim_deadline, COALESCE(live_until, 0)));
