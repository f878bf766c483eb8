package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// deliveriesOf lists a webhook's deliveries as "event" strings, oldest
// first.
func deliveriesOf(t *testing.T, s store.Store, id string) []store.WebhookDelivery {
	t.Helper()
	ds, err := s.ListWebhookDeliveries(ctx(t), id, 0)
	must(t, "list deliveries of "+id, err)
	slices.Reverse(ds)
	return ds
}

func eventNames(ds []store.WebhookDelivery) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.Event)
	}
	return out
}

// testWebhooks: subscriptions round-trip; a session's writes queue the
// deliveries their changes imply in the same transaction (none when it
// rolls back), filtered by event and outpost; leases, attempts,
// redelivery, disabling and deletion.
func testWebhooks(t *testing.T, s store.Store) {
	all := store.Webhook{ID: "wh_all", URL: "https://example.com/a", Events: []string{api.EventSessionCreated, api.EventSessionEnded,
		api.EventSessionRunning, api.EventSessionWaitingForApproval, api.EventBudgetReached}, Secret: "sec-a", CreatedAt: base}
	other := store.Webhook{ID: "wh_other", URL: "https://example.com/b", Events: []string{api.EventSessionCreated, api.EventWorkerConnected},
		OutpostID: "op2", Secret: "sec-b", CreatedAt: at(time.Second)}
	mine := store.Webhook{ID: "wh_mine", URL: "http://10.0.0.1/c", Events: []string{api.EventSessionClaimed, api.EventWorkerConnected},
		OutpostID: "op", Secret: "sec-c", CreatedAt: at(2 * time.Second)}
	for _, w := range []store.Webhook{all, other, mine} {
		must(t, "create "+w.ID, s.CreateWebhook(ctx(t), w))
	}
	wantErr(t, "duplicate id", s.CreateWebhook(ctx(t), all), store.ErrConflict)
	got, err := s.GetWebhook(ctx(t), "wh_mine")
	must(t, "get", err)
	equal(t, "get", got, mine)
	_, err = s.GetWebhook(ctx(t), "nope")
	wantErr(t, "get missing", err, store.ErrNotFound)
	list, err := s.ListWebhooks(ctx(t))
	must(t, "list", err)
	equal(t, "list oldest first", list, []store.Webhook{all, other, mine})

	sess := newSession("s1", "op", "t", 0)
	create(t, s, sess)
	// A write that rolls back queues nothing.
	_, err = s.UpdateSession(ctx(t), "s1", func(st store.Session, _ store.QueueEntry) (store.Mutation, error) {
		return store.Mutation{}, errBoom
	})
	wantErr(t, "fn error", err, errBoom)
	setEntry(t, s, "s1", claim("acc-1", at(time.Minute)))
	setEntry(t, s, "s1", func(e *store.QueueEntry) { e.ClaimDeadline = at(2 * time.Minute) }) // a renewal: no event
	update := func(fn func(st *store.Session) []store.WebhookEvent) {
		t.Helper()
		_, err := s.UpdateSession(ctx(t), "s1", func(st store.Session, _ store.QueueEntry) (store.Mutation, error) {
			hooks := fn(&st)
			return store.Mutation{Session: &st, Webhooks: hooks}, nil
		})
		must(t, "update", err)
	}
	update(func(st *store.Session) []store.WebhookEvent { st.Status = api.StatusRunning; return nil })
	update(func(st *store.Session) []store.WebhookEvent {
		st.StatusDetail = api.StatusDetailWaitingForApproval
		return nil
	})
	update(func(st *store.Session) []store.WebhookEvent { st.StatusDetail = ""; return nil })
	budgetID := store.NewWebhookEventID()
	update(func(st *store.Session) []store.WebhookEvent {
		return []store.WebhookEvent{{ID: budgetID, Name: api.EventBudgetReached, OutpostID: "op", Data: json.RawMessage(`{"budget":{"limit":"tokens"}}`), CreatedAt: time.Now()}}
	})
	update(func(st *store.Session) []store.WebhookEvent {
		st.Status, st.Reason, st.EndedAt = api.StatusExit, "Done.", ptr(at(time.Hour))
		return nil
	})
	ds := deliveriesOf(t, s, "wh_all")
	equal(t, "every outpost's subscription", eventNames(ds), []string{api.EventSessionCreated, api.EventSessionRunning,
		api.EventSessionWaitingForApproval, api.EventBudgetReached, api.EventSessionEnded})
	equal(t, "other outpost's subscription", eventNames(deliveriesOf(t, s, "wh_other")), []string{})
	equal(t, "own outpost's subscription", eventNames(deliveriesOf(t, s, "wh_mine")), []string{api.EventSessionClaimed})
	var ended struct {
		Session api.WebhookSession `json:"session"`
	}
	must(t, "decode data", json.Unmarshal(ds[4].Data, &ended))
	if ended.Session.ID != "s1" || ended.Session.OutpostID != "op" || ended.Session.Status != api.StatusExit || ended.Session.Reason != "Done." ||
		ended.Session.EndedAt == nil {
		t.Errorf("ended data = %s", ds[4].Data)
	}
	equal(t, "budget data", string(ds[3].Data), `{"budget":{"limit":"tokens"}}`)
	equal(t, "budget delivery id", ds[3].ID, budgetID+".wh_all")
	for _, d := range ds {
		if d.State != api.DeliveryPending || d.Attempts != 0 || d.WebhookID != "wh_all" {
			t.Errorf("new delivery %s: state %s attempts %d webhook %s", d.ID, d.State, d.Attempts, d.WebhookID)
		}
	}

	// An event of its own transaction, filtered by outpost.
	must(t, "emit", s.EmitWebhookEvents(ctx(t), store.WebhookEvent{ID: "whd_w1", Name: api.EventWorkerConnected, OutpostID: "op2",
		Data: json.RawMessage(`{"worker":{"acceptor_id":"a"}}`), CreatedAt: at(time.Hour)}))
	equal(t, "worker event", eventNames(deliveriesOf(t, s, "wh_other")), []string{api.EventWorkerConnected})
	equal(t, "worker event of another outpost", eventNames(deliveriesOf(t, s, "wh_mine")), []string{api.EventSessionClaimed})

	// Leases: the due deliveries go to one owner until the lease ends.
	now := time.Now().Add(time.Minute)
	got1, err := s.ClaimWebhookDeliveries(ctx(t), now, "r1", now.Add(time.Minute), 100)
	must(t, "claim r1", err)
	// The first of the session's chain to wh_all, the budget event (in
	// no chain), the worker's and wh_mine's claim.
	if len(got1) != 4 {
		t.Fatalf("claimed %d deliveries, want 4", len(got1))
	}
	for _, d := range got1 {
		want := map[string]string{"wh_all": "sec-a", "wh_other": "sec-b", "wh_mine": "sec-c"}[d.WebhookID]
		if d.Secret != want || d.URL == "" || d.LeaseOwner != "r1" {
			t.Errorf("claimed %s: secret %q url %q owner %q", d.ID, d.Secret, d.URL, d.LeaseOwner)
		}
	}
	got2, err := s.ClaimWebhookDeliveries(ctx(t), now, "r2", now.Add(time.Minute), 100)
	must(t, "claim r2", err)
	equal(t, "claim while leased", len(got2), 0)

	d0 := ds[0].ID
	_, err = s.RecordWebhookAttempt(ctx(t), store.WebhookAttempt{DeliveryID: d0, Owner: "r2", At: now, OK: true})
	wantErr(t, "record without the lease", err, store.ErrNotFound)
	failing, err := s.RecordWebhookAttempt(ctx(t), store.WebhookAttempt{DeliveryID: d0, Owner: "r1", At: now, Code: 500,
		Duration: 30 * time.Millisecond, Response: "oops", Error: "the receiver answered 500", Next: now.Add(5 * time.Second)})
	must(t, "record failure", err)
	equal(t, "failing since", failing.UnixMilli(), now.UnixMilli())
	ds = deliveriesOf(t, s, "wh_all")
	if d := ds[0]; d.State != api.DeliveryPending || d.Attempts != 1 || d.ResponseCode != 500 || d.Response != "oops" ||
		d.DurationMS != 30 || d.LeaseOwner != "" || d.NextAttemptAt.UnixMilli() != now.Add(5*time.Second).UnixMilli() {
		t.Errorf("after a failure: %+v", d)
	}
	// Once due again and unleased, another owner takes it.
	got2, err = s.ClaimWebhookDeliveries(ctx(t), now.Add(5*time.Second), "r2", now.Add(time.Minute), 100)
	must(t, "claim r2 again", err)
	if len(got2) != 1 || got2[0].ID != d0 {
		t.Fatalf("claim after retry due: %d deliveries", len(got2))
	}
	failing, err = s.RecordWebhookAttempt(ctx(t), store.WebhookAttempt{DeliveryID: d0, Owner: "r2", At: now.Add(6 * time.Second), OK: true, Code: 204})
	must(t, "record success", err)
	if !failing.IsZero() {
		t.Errorf("failing since %v after a success", failing)
	}
	// The next of the chain goes once the first is delivered.
	got2, err = s.ClaimWebhookDeliveries(ctx(t), now.Add(6*time.Second), "r1", now.Add(time.Minute), 100)
	must(t, "claim the chain's next", err)
	if len(got2) != 1 || got2[0].ID != ds[1].ID {
		t.Fatalf("claim after the chain's first was delivered: %d deliveries", len(got2))
	}
	// Given up: failed, never claimed again.
	_, err = s.RecordWebhookAttempt(ctx(t), store.WebhookAttempt{DeliveryID: ds[1].ID, Owner: "r1", At: now, Error: "refused"})
	must(t, "record give up", err)
	ds = deliveriesOf(t, s, "wh_all")
	if ds[0].State != api.DeliveryDelivered || ds[0].Attempts != 2 || ds[0].DeliveredAt.IsZero() || ds[1].State != api.DeliveryFailed {
		t.Errorf("after success and give up: %s %d, %s", ds[0].State, ds[0].Attempts, ds[1].State)
	}
	later := now.Add(2 * time.Minute) // every lease ended
	rd, err := s.RedeliverWebhookDelivery(ctx(t), "wh_all", ds[1].ID, later)
	must(t, "redeliver", err)
	if rd.State != api.DeliveryPending || !rd.NextAttemptAt.Equal(time.UnixMilli(later.UnixMilli()).UTC()) || !rd.WindowStart.Equal(rd.NextAttemptAt) {
		t.Errorf("redelivered: %+v", rd)
	}
	_, err = s.RedeliverWebhookDelivery(ctx(t), "wh_mine", ds[1].ID, later)
	wantErr(t, "redeliver under another webhook", err, store.ErrNotFound)

	counts, err := s.CountWebhookDeliveries(ctx(t))
	must(t, "count", err)
	equal(t, "counts", counts, map[string]int{api.DeliveryPending: 6, api.DeliveryDelivered: 1})

	// Disabling fails its pending deliveries and queues no more.
	ok, err := s.DisableWebhook(ctx(t), "wh_all", later, "Every delivery failed.")
	must(t, "disable", err)
	if !ok {
		t.Error("disable reported nothing disabled")
	}
	ok, err = s.DisableWebhook(ctx(t), "wh_all", later, "again")
	must(t, "disable again", err)
	if ok {
		t.Error("a second disable reported a change")
	}
	got, err = s.GetWebhook(ctx(t), "wh_all")
	must(t, "get disabled", err)
	if got.DisabledAt.IsZero() || got.DisabledReason != "Every delivery failed." {
		t.Errorf("disabled webhook: %+v", got)
	}
	create(t, s, newSession("s2", "op", "t", time.Minute))
	for _, d := range deliveriesOf(t, s, "wh_all") {
		if d.State == api.DeliveryPending {
			t.Errorf("delivery %s of a disabled webhook is pending", d.ID)
		}
	}
	equal(t, "deliveries of a disabled webhook", len(deliveriesOf(t, s, "wh_all")), 5)
	claimed, err := s.ClaimWebhookDeliveries(ctx(t), later.Add(time.Hour), "r3", later.Add(2*time.Hour), 100)
	must(t, "claim after disable", err)
	for _, d := range claimed {
		if d.WebhookID == "wh_all" {
			t.Errorf("claimed %s of a disabled webhook", d.ID)
		}
	}

	must(t, "delete", s.DeleteWebhook(ctx(t), "wh_all"))
	wantErr(t, "delete again", s.DeleteWebhook(ctx(t), "wh_all"), store.ErrNotFound)
	equal(t, "deliveries of a deleted webhook", len(deliveriesOf(t, s, "wh_all")), 0)
}

// testWebhooksConcurrentClaim: senders racing for the outbox never lease
// one delivery twice.
func testWebhooksConcurrentClaim(t *testing.T, s store.Store) {
	must(t, "create", s.CreateWebhook(ctx(t), store.Webhook{ID: "wh_1", URL: "https://example.com", Events: []string{api.EventWorkerGone}, Secret: "x", CreatedAt: base}))
	const n = 60
	for i := range n {
		must(t, "emit", s.EmitWebhookEvents(ctx(t), store.WebhookEvent{ID: fmt.Sprintf("whd_%03d", i), Name: api.EventWorkerGone, Data: json.RawMessage(`{}`), CreatedAt: base}))
	}
	now := time.Now().Add(time.Minute)
	var mu sync.Mutex
	seen := map[string]string{}
	var wg sync.WaitGroup
	for w := range 6 {
		owner := fmt.Sprintf("r%d", w)
		wg.Go(func() {
			for range 20 {
				ds, err := s.ClaimWebhookDeliveries(ctx(t), now, owner, now.Add(time.Hour), 4)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				for _, d := range ds {
					if prev, ok := seen[d.ID]; ok {
						t.Errorf("delivery %s leased by %s and %s", d.ID, prev, owner)
					}
					seen[d.ID] = owner
				}
				mu.Unlock()
				if len(ds) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	equal(t, "leased", len(seen), n)
}
