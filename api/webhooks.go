package api

import "encoding/json"

// Webhook event names: what a subscription (CreateWebhookRequest.Events)
// names and what a delivery's Outpost-Event header and body's event say.
const (
	EventSessionCreated            = "session.created"
	EventSessionClaimed            = "session.claimed"
	EventSessionRunning            = "session.running"
	EventSessionWaitingForApproval = "session.waiting_for_approval"
	EventSessionSuspended          = "session.suspended"
	EventSessionResumed            = "session.resumed"
	EventSessionEnded              = "session.ended"
	EventWorkerConnected           = "worker.connected"
	EventWorkerGone                = "worker.gone"
	// EventBudgetReached is a session stopped at a budget limit: its own
	// or its outpost's (data.budget: kind, limit, used, on_limit, reason).
	EventBudgetReached = "budget.reached"
)

// WebhookEvents lists every event a subscription may name.
var WebhookEvents = []string{
	EventSessionCreated, EventSessionClaimed, EventSessionRunning, EventSessionWaitingForApproval,
	EventSessionSuspended, EventSessionResumed, EventSessionEnded,
	EventWorkerConnected, EventWorkerGone, EventBudgetReached,
}

// StatusDetailWaitingForApproval is the status_detail of a session whose
// tool call waits for a person's decision; becoming it emits
// EventSessionWaitingForApproval.
const StatusDetailWaitingForApproval = "waiting_for_approval"

// Headers of a webhook delivery.
const (
	// HeaderWebhookSignature is "t=<unix>,v1=<hex HMAC-SHA256(secret,
	// "<t>.<body>")>".
	HeaderWebhookSignature = "Outpost-Signature"
	// HeaderWebhookDelivery is the delivery's id, the same on every try
	// and equal to the body's id: receivers deduplicate on it.
	HeaderWebhookDelivery = "Outpost-Delivery"
	// HeaderWebhookEvent is the event's name.
	HeaderWebhookEvent = "Outpost-Event"
)

// Delivery states (WebhookDelivery.State).
const (
	// DeliveryPending: not acknowledged yet; tried again at next_attempt_at.
	DeliveryPending = "pending"
	// DeliveryDelivered: the receiver answered 2xx.
	DeliveryDelivered = "delivered"
	// DeliveryFailed: given up after the retry window (or the webhook was
	// disabled); a redelivery tries it again.
	DeliveryFailed = "failed"
)

// CreateWebhookRequest is the body of POST /v1/webhooks.
type CreateWebhookRequest struct {
	// URL receives the deliveries: http:// or https://.
	URL string `json:"url"`
	// Events are names of WebhookEvents; at least one.
	Events []string `json:"events"`
	// Outpost, when set (name or id), limits the subscription to the
	// events of that outpost; "" subscribes to every outpost's.
	Outpost string `json:"outpost,omitempty"`
}

// Webhook is a subscription. Its secret is shown once, when created.
type Webhook struct {
	// ID is "wh_…".
	ID     string   `json:"id"`
	URL    string   `json:"url"`
	Events []string `json:"events"`
	// OutpostID is the outpost the subscription is limited to; "" for all.
	OutpostID string `json:"outpost_id,omitempty"`
	// Secret signs the deliveries; only in the answer of POST /v1/webhooks.
	Secret string `json:"secret,omitempty"`
	// CreatedAt is Unix seconds.
	CreatedAt int64 `json:"created_at"`
	// FailingSince is when the first of the deliveries that have failed
	// since the last success failed (Unix seconds); null when the last
	// attempt succeeded.
	FailingSince *int64 `json:"failing_since"`
	// DisabledAt is when the server stopped delivering after persistent
	// failure (Unix seconds), with DisabledReason; null while enabled.
	DisabledAt     *int64 `json:"disabled_at"`
	DisabledReason string `json:"disabled_reason,omitempty"`
}

// WebhookList is the answer of GET /v1/webhooks.
type WebhookList struct {
	Items []Webhook `json:"items"`
}

// WebhookDelivery is one event sent (or to be sent) to one webhook.
type WebhookDelivery struct {
	// ID is "whd_…", the Outpost-Delivery header and the body's id.
	ID        string `json:"id"`
	WebhookID string `json:"webhook_id"`
	Event     string `json:"event"`
	// State is a Delivery… constant.
	State string `json:"state"`
	// Attempts counts the requests made.
	Attempts int `json:"attempts"`
	// ResponseCode is the last answer's HTTP status; 0 when none came.
	ResponseCode int `json:"response_code"`
	// DurationMS is how long the last attempt took.
	DurationMS int64 `json:"duration_ms"`
	// Response is the first bytes of the last answer's body.
	Response string `json:"response,omitempty"`
	// Error says why the last attempt failed; "" when it did not.
	Error string `json:"error,omitempty"`
	// CreatedAt, LastAttemptAt, NextAttemptAt and DeliveredAt are Unix
	// seconds; null when there is none (NextAttemptAt: not pending).
	CreatedAt     int64  `json:"created_at"`
	LastAttemptAt *int64 `json:"last_attempt_at"`
	NextAttemptAt *int64 `json:"next_attempt_at"`
	DeliveredAt   *int64 `json:"delivered_at"`
}

// WebhookDeliveryList is the answer of GET /v1/webhooks/{id}/deliveries,
// newest first.
type WebhookDeliveryList struct {
	Items []WebhookDelivery `json:"items"`
}

// WebhookPayload is the JSON body of a delivery.
type WebhookPayload struct {
	// ID is the delivery's id (the Outpost-Delivery header).
	ID    string `json:"id"`
	Event string `json:"event"`
	// CreatedAt is when the event happened, Unix seconds.
	CreatedAt int64       `json:"created_at"`
	Data      WebhookData `json:"data"`
}

// WebhookData is what an event is about: a session's events carry
// Session, a worker's Worker; other events (budget.reached) may add their
// own keys, kept in Extra.
type WebhookData struct {
	Session *WebhookSession `json:"session,omitempty"`
	Worker  *WebhookWorker  `json:"worker,omitempty"`
	// Extra is any further object of the event (e.g. "budget"), merged
	// into data by the emitter.
	Extra map[string]json.RawMessage `json:"-"`
}

// MarshalJSON writes Session, Worker and Extra's keys as one object.
func (d WebhookData) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, 2+len(d.Extra))
	for k, v := range d.Extra {
		m[k] = v
	}
	if d.Session != nil {
		m["session"] = d.Session
	}
	if d.Worker != nil {
		m["worker"] = d.Worker
	}
	return json.Marshal(m)
}

// WebhookSession is a session as an event shows it.
type WebhookSession struct {
	ID        string `json:"id"`
	OutpostID string `json:"outpost_id"`
	// Status, StatusDetail and Reason are the session's after the change.
	Status       string `json:"status"`
	StatusDetail string `json:"status_detail,omitempty"`
	Reason       string `json:"reason,omitempty"`
	// AcceptorID is the claim's holder; "" when unclaimed.
	AcceptorID string `json:"acceptor_id,omitempty"`
	// CreatedAt is Unix seconds; EndedAt too, when it ended.
	CreatedAt int64  `json:"created_at"`
	EndedAt   *int64 `json:"ended_at,omitempty"`
}

// WebhookWorker is a worker (or orchestrator) as worker.* events show it.
type WebhookWorker struct {
	OutpostID  string `json:"outpost_id"`
	AcceptorID string `json:"acceptor_id"`
	Kind       string `json:"kind,omitempty"`
}
