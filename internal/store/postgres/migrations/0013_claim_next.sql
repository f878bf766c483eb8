-- Issue 17 part C: server-assigned claims (ClaimNext) take an outpost's
-- first claimable entry in claim order. Only live pending entries are in
-- this index, so the pick does not walk the deleted markers history leaves.
CREATE INDEX queue_claim_next ON queue (outpost_id, priority DESC, created_at, session_id)
	WHERE phase = 'pending' AND NOT deleted;
