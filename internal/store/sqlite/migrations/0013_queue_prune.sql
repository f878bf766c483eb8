-- Queue tombstones of ended sessions are pruned after a horizon (part W of
-- issue 17). queue_horizons holds, per outpost, the highest rev of a
-- tombstone deleted: a watch of the outpost from a lower cursor re-lists
-- instead of replaying, as it might miss a deletion. The index finds the
-- oldest tombstones.
CREATE TABLE queue_horizons (
    outpost_id TEXT PRIMARY KEY,
    rev        INTEGER NOT NULL
) STRICT;
CREATE INDEX queue_tombstones ON queue (updated_at) WHERE deleted = 1;
