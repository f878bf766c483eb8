package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// Webhook is a stored webhook subscription. Its secret is sealed at rest
// with the store's keyring, bound to the webhook's id.
type Webhook struct {
	ID     string
	URL    string
	Events []string
	// OutpostID limits it to one outpost's events; "" for every outpost.
	OutpostID string
	// Secret is the signing secret, in clear in memory.
	Secret    string
	CreatedAt time.Time
	// FailingSince is when the first attempt of the current run of
	// failures failed; zero while the last attempt succeeded.
	FailingSince time.Time
	// DisabledAt is zero while deliveries are made; DisabledReason says
	// why they stopped.
	DisabledAt     time.Time
	DisabledReason string
}

// WebhookEvent is one event to deliver to every enabled subscription
// that names it and covers its outpost. The store queues one delivery per
// subscription, in the transaction that writes it.
type WebhookEvent struct {
	// ID prefixes the ids of its deliveries ("whd_…"); required.
	ID string
	// Name is an api.Event… webhook event name.
	Name string
	// OutpostID is the outpost the event is about ("" reaches only
	// subscriptions of every outpost).
	OutpostID string
	// Data is the payload's data object (api.WebhookData as JSON).
	Data      json.RawMessage
	CreatedAt time.Time
	// OrderKey chains the events that must reach a receiver in order
	// (a session's: its id): a delivery is not sent while an older one
	// of its chain to the same webhook is pending. "" is in no chain.
	OrderKey string
}

// WebhookDelivery is one event queued for one webhook: the outbox row
// that stays until the receiver acknowledges it or it is given up.
type WebhookDelivery struct {
	ID        string
	WebhookID string
	Event     string
	Data      json.RawMessage
	State     string // api.Delivery…
	Attempts  int
	// ResponseCode, DurationMS, Response and Error are the last attempt's.
	ResponseCode int
	DurationMS   int64
	Response     string
	Error        string
	CreatedAt    time.Time
	// WindowStart is when the current retry window began: the creation,
	// or the last redelivery by hand.
	WindowStart   time.Time
	NextAttemptAt time.Time
	LastAttemptAt time.Time
	DeliveredAt   time.Time
	// LeaseOwner holds the delivery until LeaseUntil while it is sent.
	LeaseOwner string
	LeaseUntil time.Time

	// URL and Secret are the webhook's, filled by ClaimWebhookDeliveries.
	URL    string
	Secret string
}

// WebhookAttempt is the outcome of one attempt of a delivery.
type WebhookAttempt struct {
	DeliveryID string
	// Owner is the lease holder recording it; a delivery whose lease
	// passed to another owner is not written.
	Owner string
	At    time.Time
	OK    bool
	// Code, Duration, Response and Error describe the answer.
	Code     int
	Duration time.Duration
	Response string
	Error    string
	// Next is when to try again after a failure; zero gives it up
	// (api.DeliveryFailed).
	Next time.Time
}

// Webhooks is the store's part for webhook subscriptions and their
// outbox. Session changes queue their deliveries themselves: CreateSession
// and UpdateSession (and its kin) write the deliveries of the events the
// change implies (SessionWebhookEvents) and of Mutation.Webhooks in the
// same transaction.
type Webhooks interface {
	// CreateWebhook inserts a subscription.
	CreateWebhook(ctx context.Context, w Webhook) error
	// GetWebhook returns one; ErrNotFound when absent.
	GetWebhook(ctx context.Context, id string) (Webhook, error)
	// ListWebhooks returns every subscription, oldest first.
	ListWebhooks(ctx context.Context) ([]Webhook, error)
	// DeleteWebhook removes a subscription and its deliveries;
	// ErrNotFound when absent.
	DeleteWebhook(ctx context.Context, id string) error
	// DisableWebhook stops deliveries to a subscription: it is marked
	// disabled at at with reason and its pending deliveries fail. It
	// reports whether it disabled it (false when it already was).
	DisableWebhook(ctx context.Context, id string, at time.Time, reason string) (bool, error)
	// EmitWebhookEvents queues the deliveries of events in one
	// transaction of their own, for changes that are not a session's
	// write (worker presence).
	EmitWebhookEvents(ctx context.Context, events ...WebhookEvent) error
	// ListWebhookDeliveries returns up to limit deliveries of a webhook,
	// newest first (0: no cap).
	ListWebhookDeliveries(ctx context.Context, webhookID string, limit int) ([]WebhookDelivery, error)
	// ClaimWebhookDeliveries leases up to limit pending deliveries of
	// enabled webhooks that are due at now, not leased and first of their
	// chain (WebhookEvent.OrderKey) to their webhook, to owner until
	// leaseUntil, oldest first, and returns them with their webhook's URL
	// and secret. Concurrent claims never return one delivery twice
	// while its lease holds (PostgreSQL: FOR UPDATE SKIP LOCKED; SQLite:
	// the one writer).
	ClaimWebhookDeliveries(ctx context.Context, now time.Time, owner string, leaseUntil time.Time, limit int) ([]WebhookDelivery, error)
	// RecordWebhookAttempt writes an attempt's outcome on its delivery,
	// only while owner still holds its lease, and on its webhook
	// (FailingSince set on the first failure, cleared by a success). It
	// returns the webhook's FailingSince after the write, and
	// ErrNotFound when the lease is no longer owner's.
	RecordWebhookAttempt(ctx context.Context, a WebhookAttempt) (failingSince time.Time, err error)
	// RedeliverWebhookDelivery makes a delivery of webhookID pending
	// again, due at now, its retry window starting at now; ErrNotFound
	// when there is no such delivery of that webhook.
	RedeliverWebhookDelivery(ctx context.Context, webhookID, deliveryID string, now time.Time) (WebhookDelivery, error)
	// CountWebhookDeliveries counts deliveries by state, for metrics.
	CountWebhookDeliveries(ctx context.Context) (map[string]int, error)
}

// SessionWebhookEvents names the webhook events that a session's write
// implies, from its state and queue entry before (prev, prevEntry) and
// after (next, nextEntry; nil when the write leaves it). A status that
// becomes claimed, running, suspended, resuming or final, a new claim
// epoch, and a status detail that becomes waiting_for_approval each name
// theirs.
func SessionWebhookEvents(prev Session, prevEntry QueueEntry, next *Session, nextEntry *QueueEntry) []string {
	var out []string
	if nextEntry != nil && nextEntry.Phase == api.PhaseClaimed && !nextEntry.Deleted &&
		(prevEntry.Phase != api.PhaseClaimed || nextEntry.Epoch != prevEntry.Epoch) {
		out = append(out, api.EventSessionClaimed)
	}
	if next == nil {
		return out
	}
	if next.Status != prev.Status {
		switch next.Status {
		case api.StatusRunning:
			out = append(out, api.EventSessionRunning)
		case api.StatusSuspended:
			out = append(out, api.EventSessionSuspended)
		case api.StatusResuming:
			out = append(out, api.EventSessionResumed)
		case api.StatusExit, api.StatusError:
			out = append(out, api.EventSessionEnded)
		}
	}
	if next.StatusDetail == api.StatusDetailWaitingForApproval && prev.StatusDetail != next.StatusDetail {
		out = append(out, api.EventSessionWaitingForApproval)
	}
	return out
}

// WebhookSessionData is the data object of a session's event: the session
// as s and e (nil: unclaimed) show it.
func WebhookSessionData(s Session, e *QueueEntry) (json.RawMessage, error) {
	ws := &api.WebhookSession{ID: s.ID, OutpostID: s.OutpostID, Status: s.Status, StatusDetail: s.StatusDetail,
		Reason: s.Reason, CreatedAt: s.CreatedAt.Unix()}
	if e != nil && e.Phase == api.PhaseClaimed && !e.Deleted {
		ws.AcceptorID = e.AcceptorID
	}
	if s.EndedAt != nil {
		t := s.EndedAt.Unix()
		ws.EndedAt = &t
	}
	return json.Marshal(api.WebhookData{Session: ws})
}

// lastEventID keeps NewWebhookEventID's ids growing within a process.
var lastEventID atomic.Int64

// NewWebhookEventID returns a fresh event id, "whd_…": the time in
// nanoseconds (raised past the last one given, so the events of one write
// sort in the order they were named) and random bytes.
func NewWebhookEventID() string {
	n := time.Now().UnixNano()
	for {
		last := lastEventID.Load()
		if n <= last {
			n = last + 1
		}
		if lastEventID.CompareAndSwap(last, n) {
			break
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("whd_%016x%s", n, hex.EncodeToString(b[:]))
}
