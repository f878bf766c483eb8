// Package webhooks delivers the events the store's outbox queued to the
// subscriptions' URLs: signed POSTs, retried with exponential backoff and
// jitter, leased so that each delivery is sent by one server at a time
// however many replicas share the store, and subscriptions disabled after
// persistent failure. It also checks subscription URLs and builds the
// signature receivers verify.
package webhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// Signature is the Outpost-Signature header of body sent at t:
// "t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
func Signature(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// ErrBadSignature is a signature that does not verify.
var ErrBadSignature = errors.New("webhook signature does not match")

// Verify checks an Outpost-Signature header against body, and that its
// time is within tolerance of now (0: not checked), as a receiver does.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: the header has no t= and v1= parts", ErrBadSignature)
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
			return fmt.Errorf("%w: its time is %s away from now", ErrBadSignature, d.Round(time.Second))
		}
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return ErrBadSignature
}

// Body is the JSON body of a delivery: the same bytes on every try.
func Body(d store.WebhookDelivery) ([]byte, error) {
	data := d.Data
	if len(data) == 0 {
		data = json.RawMessage(`{}`)
	}
	return json.Marshal(struct {
		ID        string          `json:"id"`
		Event     string          `json:"event"`
		CreatedAt int64           `json:"created_at"`
		Data      json.RawMessage `json:"data"`
	}{d.ID, d.Event, d.CreatedAt.Unix(), data})
}

// ValidateEvents checks a subscription's event names and returns them
// without repeats, in the order given.
func ValidateEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("events must name at least one of: %s", strings.Join(api.WebhookEvents, ", "))
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range events {
		known := false
		for _, k := range api.WebhookEvents {
			known = known || k == e
		}
		if !known {
			return nil, fmt.Errorf("event %q is not one of: %s", e, strings.Join(api.WebhookEvents, ", "))
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out, nil
}
