-- 0003_remote_binary_sha, as the SQLite store's 0005: the remote build an
-- outpost pins for its sessions ('' when none), and the build a queue entry
-- asks its claimer to run: the session's pin, else its outpost's, resolved
-- when the session is created ('' means the worker's default, null on the
-- wire).
ALTER TABLE outposts ADD COLUMN remote_binary_sha TEXT NOT NULL DEFAULT '';
ALTER TABLE queue ADD COLUMN remote_binary_sha TEXT NOT NULL DEFAULT '';
