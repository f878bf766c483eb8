package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
	"github.com/outpost-sh/outpost/internal/store/sqlite"
	"github.com/outpost-sh/outpost/internal/webhooks"
)

// stuck is a transport whose requests reach no receiver and never
// return until released: the sender using it is as good as dead.
type stuck struct {
	arrived chan struct{}
	release chan struct{}
}

func (s *stuck) RoundTrip(req *http.Request) (*http.Response, error) {
	close(s.arrived)
	<-s.release
	return nil, errors.New("the process that sent this is gone")
}

// TestSenderDiesMidDelivery: a sender that leased a delivery and died
// while sending it loses nothing: once its lease ends another sender
// delivers it, once, under the same id, and what the dead one might still
// record is refused.
func TestSenderDiesMidDelivery(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "outpost.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	r := newReceiver(t, 0)
	const secret = "whsec_lease"
	r.mu.Lock()
	r.secret = secret
	r.mu.Unlock()
	if err := st.CreateWebhook(ctx, store.Webhook{ID: "wh_1", URL: r.srv.URL, Events: []string{api.EventWorkerGone},
		Secret: secret, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.EmitWebhookEvents(ctx, store.WebhookEvent{ID: store.NewWebhookEventID(), Name: api.EventWorkerGone,
		Data: json.RawMessage(`{"worker":{"acceptor_id":"w-1"}}`), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	tr := &stuck{arrived: make(chan struct{}), release: make(chan struct{})}
	dead := webhooks.New(webhooks.Options{Store: st, Owner: "r-dead", Now: now, Timeout: time.Second,
		Client: &http.Client{Transport: tr}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = dead.RunOnce(context.Background())
	}()
	<-tr.arrived

	live := webhooks.New(webhooks.Options{Store: st, Owner: "r-live", Now: now, Timeout: time.Second, AllowInternal: true})
	// While the dead sender's lease holds, nobody else takes it.
	if n, _, err := live.RunOnce(ctx); err != nil || n != 0 {
		t.Fatalf("a claim under another's lease: %d deliveries (%v)", n, err)
	}
	// Past the lease (at most Batch×Timeout + 30 s), the live one does.
	offset.Store(int64(time.Duration(webhooks.DefaultBatch)*time.Second + time.Minute))
	if n, ok, err := live.RunOnce(ctx); err != nil || n != 1 || ok != 1 {
		t.Fatalf("after the lease: leased %d, delivered %d (%v)", n, ok, err)
	}
	close(tr.release)
	<-done

	got := r.received()
	if len(got) != 1 {
		t.Fatalf("the receiver got %d requests, want 1", len(got))
	}
	ds, err := st.ListWebhookDeliveries(ctx, "wh_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].ID != got[0].Delivery || ds[0].State != api.DeliveryDelivered || ds[0].Attempts != 1 || ds[0].Error != "" {
		t.Errorf("the delivery after the dead sender's late outcome: %+v", ds)
	}
}
