-- Model calls and tokens of llm sessions (api.Usage as JSON; NULL before any).
ALTER TABLE sessions ADD COLUMN usage_json TEXT;
