package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sealed"
)

// WebhookCols are the columns of a webhook, which scanWebhook reads.
const WebhookCols = `id, url, events_json, outpost_id, secret, created_at, failing_since, disabled_at, disabled_reason`

// DeliveryCols are the columns of a delivery, which scanDelivery reads
// (prefixed with d. where joined).
const DeliveryCols = `d.id, d.webhook_id, d.event, d.data_json, d.state, d.attempts, d.response_code, d.duration_ms,
	d.response, d.error, d.created_at, d.window_start, d.next_attempt_at, d.last_attempt_at, d.delivered_at,
	d.lease_owner, d.lease_until`

// Webhook statements.
const (
	insertWebhookSQL = `INSERT INTO webhooks (` + WebhookCols + `) VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL, '')`
	getWebhookSQL    = `SELECT ` + WebhookCols + ` FROM webhooks WHERE id = $1`
	listWebhooksSQL  = `SELECT ` + WebhookCols + ` FROM webhooks ORDER BY created_at, id`
	// emitWebhookSQL queues one delivery of an event ($1 id prefix, $2
	// name, $3 data, $4 time, $5 outpost, $6 the name quoted as in
	// events_json, as a LIKE pattern) per enabled subscription that
	// names it and covers the outpost. The casts let PostgreSQL type the
	// parameters of the SELECT list.
	emitWebhookSQL = `INSERT INTO webhook_deliveries (id, webhook_id, event, data_json, state, created_at, window_start, next_attempt_at, order_key)
		SELECT CAST($1 AS TEXT) || '.' || w.id, w.id, CAST($2 AS TEXT), CAST($3 AS TEXT), '` + api.DeliveryPending + `',
			CAST($4 AS BIGINT), CAST($4 AS BIGINT), CAST($4 AS BIGINT), CAST($7 AS TEXT)
		FROM webhooks w
		WHERE w.disabled_at IS NULL AND (w.outpost_id = '' OR w.outpost_id = $5) AND w.events_json LIKE $6`
	listDeliveriesSQL = `SELECT ` + DeliveryCols + ` FROM webhook_deliveries d WHERE d.webhook_id = $1
		ORDER BY d.created_at DESC, d.id DESC LIMIT $2`
	getDeliverySQL = `SELECT ` + DeliveryCols + ` FROM webhook_deliveries d WHERE d.id = $1 AND d.webhook_id = $2`
	// dueDeliveriesSQL picks the deliveries to lease ($1 now, $2 limit):
	// due, unleased, of an enabled webhook, and with no older pending
	// delivery of their chain; the dialect's lock suffix follows.
	dueDeliveriesSQL = `SELECT ` + DeliveryCols + `, w.url, w.secret FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id
		WHERE d.state = '` + api.DeliveryPending + `' AND d.next_attempt_at <= $1 AND d.lease_until <= $1 AND w.disabled_at IS NULL
			AND (d.order_key = '' OR NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.webhook_id = d.webhook_id
				AND p.order_key = d.order_key AND p.state = '` + api.DeliveryPending + `'
				AND (p.created_at < d.created_at OR (p.created_at = d.created_at AND p.id < d.id))))
		ORDER BY d.next_attempt_at, d.created_at, d.id LIMIT $2`
	leaseDeliverySQL = `UPDATE webhook_deliveries SET lease_owner = $2, lease_until = $3 WHERE id = $1`
	recordAttemptSQL = `UPDATE webhook_deliveries SET attempts = attempts + 1, response_code = $3, duration_ms = $4, response = $5,
		error = $6, last_attempt_at = $7, state = $8, next_attempt_at = $9, delivered_at = COALESCE($10, delivered_at),
		lease_owner = '', lease_until = 0
		WHERE id = $1 AND lease_owner = $2 AND state = '` + api.DeliveryPending + `'`
	webhookOfDeliverySQL = `SELECT webhook_id FROM webhook_deliveries WHERE id = $1`
	webhookSucceededSQL  = `UPDATE webhooks SET failing_since = NULL WHERE id = $1`
	webhookFailedSQL     = `UPDATE webhooks SET failing_since = COALESCE(failing_since, $2) WHERE id = $1`
	webhookFailingSQL    = `SELECT failing_since FROM webhooks WHERE id = $1`
	disableWebhookSQL    = `UPDATE webhooks SET disabled_at = $2, disabled_reason = $3 WHERE id = $1 AND disabled_at IS NULL`
	failPendingSQL       = `UPDATE webhook_deliveries SET state = '` + api.DeliveryFailed + `',
		error = CASE WHEN error = '' THEN $2 ELSE error END
		WHERE webhook_id = $1 AND state = '` + api.DeliveryPending + `'`
	redeliverSQL = `UPDATE webhook_deliveries SET state = '` + api.DeliveryPending + `', next_attempt_at = $3, window_start = $3
		WHERE id = $1 AND webhook_id = $2`
	deleteDeliveriesSQL = `DELETE FROM webhook_deliveries WHERE webhook_id = $1`
	deleteWebhookSQL    = `DELETE FROM webhooks WHERE id = $1`
	countDeliveriesSQL  = `SELECT state, COUNT(*) FROM webhook_deliveries GROUP BY state`
)

// webhookBind is what a webhook's sealed secret is bound to, so that a
// value copied onto another row does not open.
func webhookBind(id string) string { return "webhook:" + id }

func sealWebhookSecret(keys *sealed.Keyring, id, secret string) (string, error) {
	return keys.SealSecrets(webhookBind(id), map[string]string{"secret": secret})
}

func openWebhookSecret(keys *sealed.Keyring, id, text string) (string, error) {
	m, err := keys.OpenSecrets(webhookBind(id), text)
	if err != nil {
		return "", fmt.Errorf("webhook %s secret: %w", id, err)
	}
	return m["secret"], nil
}

func (s *Store) scanWebhook(sc Scanner) (store.Webhook, error) {
	var w store.Webhook
	var events, secret string
	var created int64
	var failing, disabled nullInt64
	if err := sc.Scan(&w.ID, &w.URL, &events, &w.OutpostID, &secret, &created, &failing, &disabled, &w.DisabledReason); err != nil {
		return store.Webhook{}, err
	}
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return store.Webhook{}, fmt.Errorf("webhook %s events: %w", w.ID, err)
	}
	var err error
	if w.Secret, err = openWebhookSecret(s.keys, w.ID, secret); err != nil {
		return store.Webhook{}, err
	}
	w.CreatedAt, w.FailingSince, w.DisabledAt = FromMS(created), failing.time(), disabled.time()
	return w, nil
}

// scanDelivery reads DeliveryCols, and the webhook's url and secret
// with withTarget.
func (s *Store) scanDelivery(sc Scanner, withTarget bool) (store.WebhookDelivery, error) {
	var d store.WebhookDelivery
	var data, secret string
	var created, window, next, leaseUntil int64
	var last, delivered nullInt64
	dest := []any{&d.ID, &d.WebhookID, &d.Event, &data, &d.State, &d.Attempts, &d.ResponseCode, &d.DurationMS,
		&d.Response, &d.Error, &created, &window, &next, &last, &delivered, &d.LeaseOwner, &leaseUntil}
	if withTarget {
		dest = append(dest, &d.URL, &secret)
	}
	if err := sc.Scan(dest...); err != nil {
		return store.WebhookDelivery{}, err
	}
	d.Data = json.RawMessage(data)
	d.CreatedAt, d.WindowStart, d.NextAttemptAt, d.LeaseUntil = FromMS(created), FromMS(window), FromMS(next), FromMS(leaseUntil)
	d.LastAttemptAt, d.DeliveredAt = last.time(), delivered.time()
	if withTarget {
		var err error
		if d.Secret, err = openWebhookSecret(s.keys, d.WebhookID, secret); err != nil {
			return store.WebhookDelivery{}, err
		}
	}
	return d, nil
}

// CreateWebhook inserts a subscription, its secret sealed.
func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook) error {
	events, err := Marshal(w.Events)
	if err != nil {
		return s.errorf(err, "create webhook %s", w.ID)
	}
	secret, err := sealWebhookSecret(s.keys, w.ID, w.Secret)
	if err != nil {
		return s.errorf(err, "create webhook %s", w.ID)
	}
	if _, err := s.db.Exec(ctx, insertWebhookSQL, w.ID, w.URL, events, w.OutpostID, secret, MS(w.CreatedAt)); err != nil {
		return s.errorf(err, "create webhook %s", w.ID)
	}
	return nil
}

// GetWebhook returns one subscription.
func (s *Store) GetWebhook(ctx context.Context, id string) (store.Webhook, error) {
	w, err := s.scanWebhook(s.db.QueryRow(ctx, getWebhookSQL, id))
	if err != nil {
		return store.Webhook{}, s.errorf(err, "get webhook %s", id)
	}
	return w, nil
}

// ListWebhooks returns every subscription, oldest first.
func (s *Store) ListWebhooks(ctx context.Context) ([]store.Webhook, error) {
	out, err := QueryAll(ctx, s.db, s.scanWebhook, listWebhooksSQL)
	if err != nil {
		return nil, s.errorf(err, "list webhooks")
	}
	return out, nil
}

// DeleteWebhook removes a subscription and its deliveries.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		if _, err := tx.Exec(ctx, deleteDeliveriesSQL, id); err != nil {
			return err
		}
		n, err := tx.Exec(ctx, deleteWebhookSQL, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return s.errorf(err, "delete webhook %s", id)
	}
	return nil
}

// DisableWebhook marks a subscription disabled and fails its pending
// deliveries, in one transaction.
func (s *Store) DisableWebhook(ctx context.Context, id string, at time.Time, reason string) (bool, error) {
	var done bool
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		n, err := tx.Exec(ctx, disableWebhookSQL, id, MS(at), reason)
		if err != nil || n == 0 {
			done = false
			return err
		}
		done = true
		_, err = tx.Exec(ctx, failPendingSQL, id, reason)
		return err
	})
	if err != nil {
		return false, s.errorf(err, "disable webhook %s", id)
	}
	return done, nil
}

// queueWebhookEvents queues into b the deliveries of events.
func queueWebhookEvents(b *Batch, events []store.WebhookEvent) {
	for _, ev := range events {
		b.Exec(emitWebhookSQL, ev.ID, ev.Name, string(ev.Data), MS(ev.CreatedAt), ev.OutpostID, `%"`+ev.Name+`"%`, ev.OrderKey)
	}
}

// EmitWebhookEvents queues events' deliveries in one transaction.
func (s *Store) EmitWebhookEvents(ctx context.Context, events ...store.WebhookEvent) error {
	if len(events) == 0 {
		return nil
	}
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		b := &Batch{}
		queueWebhookEvents(b, events)
		return tx.Send(ctx, b)
	})
	if err != nil {
		return s.errorf(err, "emit webhook event %s", events[0].Name)
	}
	return nil
}

// sessionWebhookEvents are the events of a session's write (prev and
// prevEntry before, next and nextEntry after; nil when not written), with
// the mutation's own, stamped at now.
func sessionWebhookEvents(prev store.Session, prevEntry store.QueueEntry, m *store.Mutation, now time.Time) ([]store.WebhookEvent, error) {
	names := store.SessionWebhookEvents(prev, prevEntry, m.Session, m.Entry)
	if len(names) == 0 {
		return m.Webhooks, nil
	}
	sess := prev
	if m.Session != nil {
		// The state a write gives omits the columns UpdateSession never
		// changes.
		sess = *m.Session
		sess.ID, sess.OutpostID, sess.CreatedAt = prev.ID, prev.OutpostID, prev.CreatedAt
	}
	entry := &prevEntry
	if m.Entry != nil {
		entry = m.Entry
	}
	if sess.OutpostID == "" {
		sess.OutpostID = entry.OutpostID
	}
	data, err := store.WebhookSessionData(sess, entry)
	if err != nil {
		return nil, fmt.Errorf("webhook data: %w", err)
	}
	out := make([]store.WebhookEvent, 0, len(names)+len(m.Webhooks))
	for _, n := range names {
		out = append(out, store.WebhookEvent{ID: store.NewWebhookEventID(), Name: n, OutpostID: sess.OutpostID, Data: data, CreatedAt: now, OrderKey: sess.ID})
	}
	return append(out, m.Webhooks...), nil
}

// ListWebhookDeliveries returns a webhook's deliveries, newest first.
func (s *Store) ListWebhookDeliveries(ctx context.Context, webhookID string, limit int) ([]store.WebhookDelivery, error) {
	out, err := QueryAll(ctx, s.db, func(sc Scanner) (store.WebhookDelivery, error) { return s.scanDelivery(sc, false) },
		listDeliveriesSQL, webhookID, s.limit(limit))
	if err != nil {
		return nil, s.errorf(err, "list deliveries of webhook %s", webhookID)
	}
	return out, nil
}

// ClaimWebhookDeliveries leases due deliveries to owner in one write
// transaction; on PostgreSQL the pick skips rows another replica's claim
// holds locked, and a lease taken is seen by every later pick.
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, now time.Time, owner string, leaseUntil time.Time, limit int) ([]store.WebhookDelivery, error) {
	var out []store.WebhookDelivery
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		var err error
		out, err = QueryAll(ctx, tx, func(sc Scanner) (store.WebhookDelivery, error) { return s.scanDelivery(sc, true) },
			dueDeliveriesSQL+s.d.Lock.Deliveries, MS(now), int64(max(limit, 1)))
		if err != nil || len(out) == 0 {
			return err
		}
		b := &Batch{}
		for i := range out {
			out[i].LeaseOwner, out[i].LeaseUntil = owner, leaseUntil
			b.MustAffect(leaseDeliverySQL, out[i].ID, owner, MS(leaseUntil))
		}
		return tx.Send(ctx, b)
	})
	if err != nil {
		return nil, s.errorf(err, "claim webhook deliveries")
	}
	return out, nil
}

// RecordWebhookAttempt writes an attempt on its delivery and webhook in
// one transaction.
func (s *Store) RecordWebhookAttempt(ctx context.Context, a store.WebhookAttempt) (time.Time, error) {
	state, next, delivered := api.DeliveryPending, MS(a.Next), any(nil)
	switch {
	case a.OK:
		state, next, delivered = api.DeliveryDelivered, MS(a.At), MS(a.At)
	case a.Next.IsZero():
		state, next = api.DeliveryFailed, MS(a.At)
	}
	var failing nullInt64
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		n, err := tx.Exec(ctx, recordAttemptSQL, a.DeliveryID, a.Owner, a.Code, a.Duration.Milliseconds(), a.Response, a.Error,
			MS(a.At), state, next, delivered)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		var webhookID string
		if err := tx.QueryRow(ctx, webhookOfDeliverySQL, a.DeliveryID).Scan(&webhookID); err != nil {
			return err
		}
		if a.OK {
			_, err = tx.Exec(ctx, webhookSucceededSQL, webhookID)
		} else {
			_, err = tx.Exec(ctx, webhookFailedSQL, webhookID, MS(a.At))
		}
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, webhookFailingSQL, webhookID).Scan(&failing)
	})
	if err != nil {
		return time.Time{}, s.errorf(err, "record attempt of delivery %s", a.DeliveryID)
	}
	return failing.time(), nil
}

// RedeliverWebhookDelivery makes a delivery pending again, due at now.
func (s *Store) RedeliverWebhookDelivery(ctx context.Context, webhookID, deliveryID string, now time.Time) (store.WebhookDelivery, error) {
	var d store.WebhookDelivery
	err := s.db.Write(ctx, nil, func(tx Tx) error {
		n, err := tx.Exec(ctx, redeliverSQL, deliveryID, webhookID, MS(now))
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		d, err = s.scanDelivery(tx.QueryRow(ctx, getDeliverySQL, deliveryID, webhookID), false)
		return err
	})
	if err != nil {
		return store.WebhookDelivery{}, s.errorf(err, "redeliver %s of webhook %s", deliveryID, webhookID)
	}
	return d, nil
}

// CountWebhookDeliveries counts deliveries by state.
func (s *Store) CountWebhookDeliveries(ctx context.Context) (map[string]int, error) {
	type row struct {
		state string
		n     int
	}
	rows, err := QueryAll(ctx, s.db, func(sc Scanner) (row, error) {
		var r row
		err := sc.Scan(&r.state, &r.n)
		return r, err
	}, countDeliveriesSQL)
	if err != nil {
		return nil, s.errorf(err, "count webhook deliveries")
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.state] = r.n
	}
	return out, nil
}
