-- 0017_network_policy, as the SQLite store's 0018: network policies, each
-- JSON (api.NetworkPolicy in its normalized form), NULL when unset. An
-- outpost's is the default of its sessions; a session's own one replaces
-- it; a queue entry holds the effective one (the session's, else its
-- outpost's; NULL when unrestricted), which the fleet API shows as
-- spec.network_policy, so a change to it is a change of the entry, with a
-- rev of its own.
ALTER TABLE outposts ADD COLUMN network_policy_json TEXT;
ALTER TABLE sessions ADD COLUMN network_policy_json TEXT;
ALTER TABLE queue ADD COLUMN network_policy_json TEXT;
