package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/outpost-sh/outpost/api"
)

// WebhooksService manages webhook subscriptions and their delivery logs;
// it needs the admin scope.
type WebhooksService struct{ c *Client }

// Create subscribes a URL to events. The answer's Secret, which signs
// every delivery, is shown only this once.
func (s *WebhooksService) Create(ctx context.Context, req api.CreateWebhookRequest) (*api.Webhook, error) {
	var w api.Webhook
	if err := s.c.do(ctx, http.MethodPost, "/v1/webhooks", nil, req, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// List returns every subscription, without secrets.
func (s *WebhooksService) List(ctx context.Context) (*api.WebhookList, error) {
	var l api.WebhookList
	if err := s.c.do(ctx, http.MethodGet, "/v1/webhooks", nil, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Delete removes a subscription and its delivery log.
func (s *WebhooksService) Delete(ctx context.Context, id string) error {
	return s.c.do(ctx, http.MethodDelete, "/v1/webhooks/"+url.PathEscape(id), nil, nil, nil)
}

// Deliveries returns a subscription's latest deliveries, newest first, at
// most limit (0: the server's bound).
func (s *WebhooksService) Deliveries(ctx context.Context, id string, limit int) (*api.WebhookDeliveryList, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var l api.WebhookDeliveryList
	if err := s.c.do(ctx, http.MethodGet, "/v1/webhooks/"+url.PathEscape(id)+"/deliveries", q, nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Redeliver queues a delivery again, due now.
func (s *WebhooksService) Redeliver(ctx context.Context, id, deliveryID string) (*api.WebhookDelivery, error) {
	var d api.WebhookDelivery
	if err := s.c.do(ctx, http.MethodPost, "/v1/webhooks/"+url.PathEscape(id)+"/deliveries/"+url.PathEscape(deliveryID)+"/redeliver", nil, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}
