-- 0025_webhooks: webhook subscriptions and their outbox of deliveries.
-- Times are Unix milliseconds; NULL is an absent time. A delivery row is
-- written in the transaction of the change it reports and stays until it
-- is acknowledged or given up; lease_owner/lease_until keep one sender.
CREATE TABLE webhooks (
	id              TEXT PRIMARY KEY,
	url             TEXT NOT NULL,
	-- events_json is the JSON array of event names.
	events_json     TEXT NOT NULL,
	-- outpost_id is '' for a subscription to every outpost.
	outpost_id      TEXT NOT NULL DEFAULT '',
	-- secret is sealed with the store's keyring, bound to the id.
	secret          TEXT NOT NULL,
	created_at      INTEGER NOT NULL,
	failing_since   INTEGER,
	disabled_at     INTEGER,
	disabled_reason TEXT NOT NULL DEFAULT ''
);

CREATE TABLE webhook_deliveries (
	id              TEXT PRIMARY KEY,
	webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
	event           TEXT NOT NULL,
	data_json       TEXT NOT NULL,
	-- order_key chains the deliveries of one webhook that must arrive in
	-- order (one session's events): only the oldest pending one of a
	-- chain is sent. '' is in no chain.
	order_key       TEXT NOT NULL DEFAULT '',
	state           TEXT NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	response_code   INTEGER NOT NULL DEFAULT 0,
	duration_ms     INTEGER NOT NULL DEFAULT 0,
	response        TEXT NOT NULL DEFAULT '',
	error           TEXT NOT NULL DEFAULT '',
	created_at      INTEGER NOT NULL,
	window_start    INTEGER NOT NULL,
	next_attempt_at INTEGER NOT NULL,
	last_attempt_at INTEGER,
	delivered_at    INTEGER,
	lease_owner     TEXT NOT NULL DEFAULT '',
	lease_until     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX webhook_deliveries_chain ON webhook_deliveries (webhook_id, order_key, created_at) WHERE state = 'pending';
