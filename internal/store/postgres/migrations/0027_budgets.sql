-- 0027_budgets, as the SQLite store's 0028: an outpost's monthly budget
-- (api.OutpostBudget as JSON), NULL when it has none. Sessions keep their
-- usage (tokens, tool calls, estimated cost) in usage_json already.
ALTER TABLE outposts ADD COLUMN budget_json TEXT;
