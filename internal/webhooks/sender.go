package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Defaults of Options.
const (
	DefaultTimeout      = 10 * time.Second
	DefaultPoll         = time.Second
	DefaultFirstRetry   = 5 * time.Second
	DefaultMaxBackoff   = time.Hour
	DefaultRetryWindow  = 24 * time.Hour
	DefaultDisableAfter = 24 * time.Hour
	DefaultBatch        = 16
	// MaxResponseBytes is how much of an answer's body a delivery keeps.
	MaxResponseBytes = 1024
)

// Outcomes of an attempt, as Options.Outcome is told them (the metric's
// label).
const (
	OutcomeDelivered = "delivered"
	OutcomeFailed    = "failed"   // an attempt failed; it will be tried again
	OutcomeGivenUp   = "given_up" // an attempt failed past the retry window
	OutcomeDisabled  = "disabled" // a webhook was disabled
)

// Options configure a Sender. Zero values mean the defaults above.
type Options struct {
	// Store holds the outbox; required.
	Store store.Webhooks
	// Owner names this sender in its leases (the replica id); required.
	Owner string
	// Client sends the requests; nil means NewClient(Timeout,
	// AllowInternal).
	Client *http.Client
	// Timeout bounds one request.
	Timeout time.Duration
	// AllowInternal lets deliveries reach loopback and link-local
	// addresses (for receivers on the server's own machine, and tests).
	AllowInternal bool
	// Poll is how often the outbox is looked at.
	Poll time.Duration
	// FirstRetry is the backoff of the first retry; each next one doubles
	// it, up to MaxBackoff, and a jitter takes up to half of it away.
	FirstRetry, MaxBackoff time.Duration
	// RetryWindow is how long a delivery is retried before it is given up.
	RetryWindow time.Duration
	// DisableAfter disables a webhook whose attempts have all failed for
	// this long.
	DisableAfter time.Duration
	// Batch is how many deliveries one look leases.
	Batch int
	// Logger receives the sender's logs; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Outcome, when set, is told each attempt's outcome (Outcome…).
	Outcome func(outcome string)
}

// Sender sends the outbox's deliveries.
type Sender struct {
	opts Options
	log  *slog.Logger
	wake chan struct{}
}

// New returns a Sender of opts.
func New(opts Options) *Sender {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Client == nil {
		opts.Client = NewClient(opts.Timeout, opts.AllowInternal)
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.FirstRetry <= 0 {
		opts.FirstRetry = DefaultFirstRetry
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = DefaultMaxBackoff
	}
	if opts.RetryWindow <= 0 {
		opts.RetryWindow = DefaultRetryWindow
	}
	if opts.DisableAfter <= 0 {
		opts.DisableAfter = DefaultDisableAfter
	}
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Outcome == nil {
		opts.Outcome = func(string) {}
	}
	return &Sender{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1)}
}

// Wake makes Run look at the outbox now rather than at its next poll.
func (s *Sender) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run sends due deliveries until ctx ends, and returns ctx's error.
func (s *Sender) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-s.wake:
		}
		n, delivered, err := s.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("webhook deliveries", "err", err)
		}
		next := s.opts.Poll
		if n == s.opts.Batch || delivered > 0 {
			next = 0 // more may be due: the batch was full, or a delivery let the next of its chain go
		}
		t.Reset(next)
	}
}

// RunOnce leases the due deliveries (up to Options.Batch) and sends them:
// those of one webhook one after another, in the order they were queued,
// different webhooks at once. It returns how many it leased and how many
// of them were delivered.
func (s *Sender) RunOnce(ctx context.Context) (leased, delivered int, err error) {
	now := s.opts.Now()
	// The lease covers every request of the batch made one after another,
	// so no other sender takes one while it may still be sent.
	lease := now.Add(time.Duration(s.opts.Batch)*s.opts.Timeout + 30*time.Second)
	ds, err := s.opts.Store.ClaimWebhookDeliveries(ctx, now, s.opts.Owner, lease, s.opts.Batch)
	if err != nil {
		return 0, 0, fmt.Errorf("claim deliveries: %w", err)
	}
	var order []string
	byHook := map[string][]store.WebhookDelivery{}
	for _, d := range ds {
		if _, ok := byHook[d.WebhookID]; !ok {
			order = append(order, d.WebhookID)
		}
		byHook[d.WebhookID] = append(byHook[d.WebhookID], d)
	}
	// Claimed work is finished even when ctx ends meanwhile, so a stop
	// does not leave a sent delivery unrecorded.
	wctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	var ok atomic.Int64
	for _, id := range order {
		wg.Go(func() {
			for _, d := range byHook[id] {
				if s.deliver(wctx, d) {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return len(ds), int(ok.Load()), nil
}

// deliver sends one delivery and records the outcome; it reports whether
// the receiver took it.
func (s *Sender) deliver(ctx context.Context, d store.WebhookDelivery) bool {
	a := s.send(ctx, d)
	switch {
	case a.OK:
		s.opts.Outcome(OutcomeDelivered)
	default:
		next := a.At.Add(Backoff(d.Attempts+1, s.opts.FirstRetry, s.opts.MaxBackoff))
		if next.Sub(d.WindowStart) <= s.opts.RetryWindow {
			a.Next = next
			s.opts.Outcome(OutcomeFailed)
		} else {
			s.opts.Outcome(OutcomeGivenUp)
			s.log.Warn("webhook delivery given up after its retry window", "webhook", d.WebhookID, "delivery", d.ID,
				"attempts", d.Attempts+1, "err", a.Error)
		}
	}
	failing, err := s.opts.Store.RecordWebhookAttempt(ctx, a)
	if errors.Is(err, store.ErrNotFound) {
		s.log.Warn("webhook delivery's lease passed to another sender before its outcome was recorded", "delivery", d.ID)
		return a.OK
	}
	if err != nil {
		s.log.Warn("record webhook delivery", "delivery", d.ID, "err", err)
		return a.OK
	}
	if a.OK || failing.IsZero() || a.At.Sub(failing) < s.opts.DisableAfter {
		return a.OK
	}
	reason := fmt.Sprintf("Every delivery failed for %s (since %s); the last: %s.", a.At.Sub(failing).Round(time.Second),
		failing.UTC().Format(time.RFC3339), a.Error)
	done, err := s.opts.Store.DisableWebhook(ctx, d.WebhookID, a.At, reason)
	if err != nil {
		s.log.Warn("disable webhook", "webhook", d.WebhookID, "err", err)
		return false
	}
	if done {
		s.opts.Outcome(OutcomeDisabled)
		s.log.Warn("webhook disabled after persistent failure: create it anew once its receiver works", "webhook", d.WebhookID,
			"url", d.URL, "failing_since", failing, "reason", reason)
	}
	return false
}

// send makes one attempt of d.
func (s *Sender) send(ctx context.Context, d store.WebhookDelivery) store.WebhookAttempt {
	a := store.WebhookAttempt{DeliveryID: d.ID, Owner: s.opts.Owner}
	body, err := Body(d)
	if err != nil {
		a.At, a.Error = s.opts.Now(), "encode body: "+err.Error()
		return a
	}
	start := s.opts.Now()
	rctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, d.URL, bytes.NewReader(body))
	if err != nil {
		a.At, a.Error = start, "build request: "+err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Outpost-Webhooks/1")
	req.Header.Set(api.HeaderWebhookSignature, Signature(d.Secret, start, body))
	req.Header.Set(api.HeaderWebhookDelivery, d.ID)
	req.Header.Set(api.HeaderWebhookEvent, d.Event)
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		a.At = s.opts.Now()
		a.Duration, a.Error = a.At.Sub(start), clean(err.Error())
		return a
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	// A little more is read so the connection can be reused; the rest is
	// dropped with it.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	a.At = s.opts.Now()
	a.Duration, a.Code, a.Response = a.At.Sub(start), resp.StatusCode, clean(string(head))
	a.OK = resp.StatusCode >= 200 && resp.StatusCode < 300
	if !a.OK {
		a.Error = fmt.Sprintf("the receiver answered %s", resp.Status)
	}
	return a
}

// clean makes text storable as a text column: valid UTF-8 without NULs.
func clean(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// Backoff is the wait before retry n (1: the first): first doubled n-1
// times, capped at max, less a random part of up to half of it.
func Backoff(n int, first, max time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return d - time.Duration(rand.Int64N(int64(half)+1))
}
