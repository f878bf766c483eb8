-- 0018_outpost_desktop, as the SQLite store's 0019: an outpost's desktop
-- setting, JSON (api.OutpostDesktop), NULL when it has none.
ALTER TABLE outposts ADD COLUMN desktop_json TEXT;
