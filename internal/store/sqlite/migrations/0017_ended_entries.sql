-- 0017_ended_entries: the entry of an ended session stays in its queue for a
-- while (pending, session_status terminated) so that watchers see the
-- session end before the entry goes. Two indexes keep those entries out of
-- what reads the live queue: queue_claimable holds only the entries a
-- claim-next may pick, in claim order, so a pick never steps over ended
-- (or suspended) ones; queue_ended holds only the ended entries still
-- listed, oldest first, for the sweep that tombstones them. Each keys on
-- phase too, one value throughout, so that a query's phase = 'pending'
-- finds it rather than the older indexes on phase. Their queries spell
-- these conditions exactly, which is how SQLite knows it may use them.
CREATE INDEX queue_claimable ON queue (outpost_id, phase, priority DESC, created_at, session_id)
    WHERE deleted = 0 AND phase = 'pending' AND session_status NOT IN ('suspended', 'terminated');
CREATE INDEX queue_ended ON queue (phase, updated_at, session_id)
    WHERE deleted = 0 AND phase = 'pending' AND session_status = 'terminated';
