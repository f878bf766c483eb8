-- 0019_outpost_desktop: an outpost's desktop setting, JSON
-- (api.OutpostDesktop), NULL when it has none.
ALTER TABLE outposts ADD COLUMN desktop_json TEXT;
