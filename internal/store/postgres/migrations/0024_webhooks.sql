-- 0024_webhooks, as the SQLite store's 0025: webhook subscriptions and
-- their outbox of deliveries. Times are Unix milliseconds; NULL is an
-- absent time. A delivery row is written in the transaction of the change
-- it reports and stays until it is acknowledged or given up; senders on
-- every replica claim due rows FOR UPDATE SKIP LOCKED under a lease.
CREATE TABLE webhooks (
	id              TEXT COLLATE "C" PRIMARY KEY,
	url             TEXT NOT NULL,
	events_json     TEXT NOT NULL,
	outpost_id      TEXT COLLATE "C" NOT NULL DEFAULT '',
	secret          TEXT NOT NULL,
	created_at      BIGINT NOT NULL,
	failing_since   BIGINT,
	disabled_at     BIGINT,
	disabled_reason TEXT NOT NULL DEFAULT ''
);

CREATE TABLE webhook_deliveries (
	id              TEXT COLLATE "C" PRIMARY KEY,
	webhook_id      TEXT COLLATE "C" NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
	event           TEXT NOT NULL,
	data_json       TEXT NOT NULL,
	-- order_key chains the deliveries of one webhook that must arrive in
	-- order (one session's events): only the oldest pending one of a
	-- chain is sent. '' is in no chain.
	order_key       TEXT NOT NULL DEFAULT '',
	state           TEXT NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	response_code   INTEGER NOT NULL DEFAULT 0,
	duration_ms     BIGINT NOT NULL DEFAULT 0,
	response        TEXT NOT NULL DEFAULT '',
	error           TEXT NOT NULL DEFAULT '',
	created_at      BIGINT NOT NULL,
	window_start    BIGINT NOT NULL,
	next_attempt_at BIGINT NOT NULL,
	last_attempt_at BIGINT,
	delivered_at    BIGINT,
	lease_owner     TEXT NOT NULL DEFAULT '',
	lease_until     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_webhook ON webhook_deliveries (webhook_id, created_at);
CREATE INDEX webhook_deliveries_chain ON webhook_deliveries (webhook_id, order_key, created_at) WHERE state = 'pending';
