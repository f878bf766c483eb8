package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/audit"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/webhooks"
)

// maxDeliveriesListed bounds GET /v1/webhooks/{id}/deliveries; ?limit=
// asks for fewer.
const maxDeliveriesListed = 200

// newWebhookSender returns the sender of the outbox's deliveries, leasing
// them under this replica's id.
func (s *Server) newWebhookSender() *webhooks.Sender {
	o := s.opts.Webhooks
	return webhooks.New(webhooks.Options{
		Store: s.store, Owner: s.opts.ReplicaID, Logger: s.log, Now: s.now,
		AllowInternal: o.AllowInternal, Timeout: o.Timeout, Poll: o.Poll, FirstRetry: o.FirstRetry,
		MaxBackoff: o.MaxBackoff, RetryWindow: o.RetryWindow, DisableAfter: o.DisableAfter,
		Outcome: func(outcome string) { s.metrics.webhookDeliveries.WithLabelValues(outcome).Inc() },
	})
}

// WebhookOptions configure webhook deliveries (package webhooks). Zero
// values mean its defaults.
type WebhookOptions struct {
	// AllowInternal lets subscriptions name loopback and link-local
	// addresses (--webhook-allow-internal).
	AllowInternal bool
	// Timeout bounds one request.
	Timeout time.Duration
	// Poll, FirstRetry, MaxBackoff, RetryWindow and DisableAfter are
	// webhooks.Options'; tests shorten them.
	Poll, FirstRetry, MaxBackoff, RetryWindow, DisableAfter time.Duration
}

// newWebhookMetric is the counter of delivery attempts by outcome.
func newWebhookMetric() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outpost_webhook_deliveries_total",
		Help: "Webhook delivery attempts by outcome (delivered, failed, given_up) and webhooks disabled after persistent failure (disabled).",
	}, []string{"outcome"})
}

// emitWebhook queues the deliveries of one event in a transaction of its
// own: for changes that are not a session's write (a session's write
// queues its own, in its transaction, through store.Mutation). A failure
// is logged: the change it reports has happened already.
func (s *Server) emitWebhook(ctx context.Context, name, outpostID, orderKey string, data api.WebhookData) {
	ev := store.WebhookEvent{ID: store.NewWebhookEventID(), Name: name, OutpostID: outpostID, CreatedAt: s.now(), OrderKey: orderKey}
	b, err := data.MarshalJSON()
	if err == nil {
		ev.Data = b
		err = s.store.EmitWebhookEvents(context.WithoutCancel(ctx), ev)
	}
	if err != nil {
		s.log.Warn("queue webhook event", "event", name, "outpost", outpostID, "err", err)
	}
}

// emitWorker queues a worker.connected or worker.gone event.
func (s *Server) emitWorker(ctx context.Context, name string, w store.Worker) {
	// One acceptor's comings and goings arrive in order.
	s.emitWebhook(ctx, name, w.OutpostID, "worker:"+w.OutpostID+"/"+w.AcceptorID, api.WebhookData{Worker: &api.WebhookWorker{
		OutpostID: w.OutpostID, AcceptorID: w.AcceptorID, Kind: w.Info.Kind}})
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	var req api.CreateWebhookRequest
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if err := webhooks.ValidateURL(req.URL, s.opts.Webhooks.AllowInternal); err != nil {
		return errBadRequest("%s.", capitalize(err.Error()))
	}
	events, err := webhooks.ValidateEvents(req.Events)
	if err != nil {
		return errBadRequest("%s.", capitalize(err.Error()))
	}
	p := principalFrom(ctx)
	hook := store.Webhook{ID: newID("wh_"), URL: req.URL, Events: events, Secret: newSecret("whsec_"), CreatedAt: s.now()}
	if req.Outpost != "" {
		o, err := s.resolveOutpost(ctx, req.Outpost)
		if err != nil {
			return err
		}
		hook.OutpostID = o.ID
	} else if p.outpostID != "" {
		return errForbidden("This token is limited to one outpost, so its webhooks must be too: set outpost.")
	}
	actx := s.audited(ctx, audit.WebhookCreate, audit.Object{Kind: audit.ObjectWebhook, ID: hook.ID},
		map[string]any{"url": hook.URL, "events": hook.Events, "outpost_id": hook.OutpostID}, nil)
	if err := s.store.CreateWebhook(actx, hook); err != nil {
		return fmt.Errorf("create webhook: %w", err)
	}
	s.log.Info("webhook created", "id", hook.ID, "url", hook.URL, "events", hook.Events, "outpost", hook.OutpostID)
	out := toAPIWebhook(hook)
	out.Secret = hook.Secret
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	all, err := s.store.ListWebhooks(r.Context())
	if err != nil {
		return fmt.Errorf("list webhooks: %w", err)
	}
	p := principalFrom(r.Context())
	list := api.WebhookList{Items: []api.Webhook{}}
	for _, h := range all {
		if p.outpostID == "" || p.outpostID == h.OutpostID {
			list.Items = append(list.Items, toAPIWebhook(h))
		}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// webhookOf finds the webhook of the request's {webhook} the caller may
// see; any other answers as a missing one.
func (s *Server) webhookOf(r *http.Request) (store.Webhook, error) {
	id := r.PathValue("webhook")
	h, err := s.store.GetWebhook(r.Context(), id)
	if err == nil && !principalFrom(r.Context()).allowsToken(store.Token{OutpostID: h.OutpostID}) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.Webhook{}, errNotFound("Webhook %s does not exist.", id)
	}
	if err != nil {
		return store.Webhook{}, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return h, nil
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	h, err := s.webhookOf(r)
	if err != nil {
		return err
	}
	actx := s.audited(r.Context(), audit.WebhookDelete, audit.Object{Kind: audit.ObjectWebhook, ID: h.ID}, nil, nil)
	if err := s.store.DeleteWebhook(actx, h.ID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errNotFound("Webhook %s does not exist.", h.ID)
		}
		return fmt.Errorf("delete webhook: %w", err)
	}
	s.log.Info("webhook deleted", "id", h.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listWebhookDeliveries(w http.ResponseWriter, r *http.Request) error {
	h, err := s.webhookOf(r)
	if err != nil {
		return err
	}
	limit := maxDeliveriesListed
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDeliveriesListed {
			return errBadRequest("limit must be a whole number from 1 to %d.", maxDeliveriesListed)
		}
		limit = n
	}
	ds, err := s.store.ListWebhookDeliveries(r.Context(), h.ID, limit)
	if err != nil {
		return fmt.Errorf("list deliveries: %w", err)
	}
	list := api.WebhookDeliveryList{Items: make([]api.WebhookDelivery, 0, len(ds))}
	for _, d := range ds {
		list.Items = append(list.Items, toAPIDelivery(d))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) redeliverWebhook(w http.ResponseWriter, r *http.Request) error {
	h, err := s.webhookOf(r)
	if err != nil {
		return err
	}
	if !h.DisabledAt.IsZero() {
		return errConflict("Webhook %s was disabled after persistent failure (%s); delete it and create it anew once its receiver works.", h.ID, h.DisabledReason)
	}
	id := r.PathValue("delivery")
	d, err := s.store.RedeliverWebhookDelivery(r.Context(), h.ID, id, s.now())
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound("Delivery %s of webhook %s does not exist.", id, h.ID)
	}
	if err != nil {
		return fmt.Errorf("redeliver: %w", err)
	}
	s.log.Info("webhook delivery queued again by hand", "webhook", h.ID, "delivery", d.ID)
	if s.webhookSender != nil {
		s.webhookSender.Wake()
	}
	writeJSON(w, http.StatusAccepted, toAPIDelivery(d))
	return nil
}

func toAPIWebhook(h store.Webhook) api.Webhook {
	return api.Webhook{ID: h.ID, URL: h.URL, Events: h.Events, OutpostID: h.OutpostID, CreatedAt: h.CreatedAt.Unix(),
		FailingSince: unixOrNil(h.FailingSince), DisabledAt: unixOrNil(h.DisabledAt), DisabledReason: h.DisabledReason}
}

func toAPIDelivery(d store.WebhookDelivery) api.WebhookDelivery {
	out := api.WebhookDelivery{ID: d.ID, WebhookID: d.WebhookID, Event: d.Event, State: d.State, Attempts: d.Attempts,
		ResponseCode: d.ResponseCode, DurationMS: d.DurationMS, Response: d.Response, Error: d.Error,
		CreatedAt: d.CreatedAt.Unix(), LastAttemptAt: unixOrNil(d.LastAttemptAt), DeliveredAt: unixOrNil(d.DeliveredAt)}
	if d.State == api.DeliveryPending {
		out.NextAttemptAt = unixOrNil(d.NextAttemptAt)
	}
	return out
}

// unixOrNil is t in Unix seconds; nil when zero.
func unixOrNil(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.Unix()
	return &v
}

// capitalize upper-cases the first letter of an ASCII sentence.
func capitalize(s string) string {
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		return string(s[0]-'a'+'A') + s[1:]
	}
	return s
}
