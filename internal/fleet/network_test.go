package fleet

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// restrictEntries makes the proxy show every queue entry with an enabled
// network policy, as a server that sets one does, and breaks the watch so
// that the consumer lists (the lists are what it rewrites).
func (e *fleetEnv) restrictEntries() {
	e.setHook(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("watch") == "true" {
			http.Error(w, "no watch in this test", http.StatusServiceUnavailable)
			return true
		}
		if !strings.HasPrefix(r.URL.Path, "/v1/queue") && !strings.HasSuffix(r.URL.Path, "/queue:claim") {
			return false
		}
		rec := httptest.NewRecorder()
		e.rp.ServeHTTP(rec, r)
		body := bytes.ReplaceAll(rec.Body.Bytes(), []byte(`"priority":0`),
			[]byte(`"priority":0,"network_policy":{"enabled":true,"allow":[{"hostname":"example.test"}]}`))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
		return true
	})
}

// TestRestrictedSessionNeverServedOpen: a consumer whose runner enforces
// no network policy neither claims a restricted session it sees, nor
// serves one it claims: that claim goes back at once with the sentence
// why, on the session's status, and the runner never runs.
func TestRestrictedSessionNeverServedOpen(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	id := e.session(ctx)
	e.restrictEntries()
	var runs atomic.Int32
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		runs.Add(1)
		return Stopped(nil)
	})
	c := e.consumer("acc-open", 1, r)
	// The entries are restricted only as the watch shows them, so the
	// server's own filter (ClaimNextRequest.NetworkPolicy), which a
	// waiting claim relies on, cannot see it: this consumer asks on each
	// change, where its check of the entries it sees applies.
	c.ClaimWait = -1
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "three lists of the queue", func() bool { return e.count("list") >= 3 })
	if n := runs.Load(); n != 0 {
		t.Fatalf("the runner ran %d times for a restricted session it cannot enforce", n)
	}
	if n := held(t, ctx, e.admin, "acc-open"); n != 0 {
		t.Fatalf("the consumer holds %d claims, want none", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}

	// Claimed by id (Serve), as a session the server hands over before
	// the consumer saw its policy: given back with the reason.
	ctx2, cancel2 := testContext(t)
	defer cancel2()
	c = e.consumer("acc-open-2", 1, r)
	err := c.Serve(ctx2, id)
	if err == nil || !strings.Contains(err.Error(), "network policy") {
		t.Fatalf("Serve = %v, want the network policy refusal", err)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the runner ran %d times", n)
	}
	s, err := e.admin.Sessions.Get(ctx2, id)
	if err != nil || !strings.Contains(s.Status.Reason, "cannot enforce a session's network policy") {
		t.Fatalf("session %+v, %v: want the refusal as its reason", s, err)
	}
	q, err := e.admin.Queue.Get(ctx2, id)
	if err != nil || q.Status.Phase != api.PhasePending {
		t.Fatalf("entry %+v, %v: want it pending for a claimer that enforces", q, err)
	}
}

// TestRestrictedSessionServedByEnforcer: a runner that enforces gets the
// restricted session; one whose enforcement broke (NetworkEnforcement
// answers why) refuses with that sentence.
func TestRestrictedSessionServedByEnforcer(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	defer cancel()
	id := e.session(ctx)
	e.restrictEntries()
	broken := errors.New("the test's namespaces are gone")
	var fail atomic.Bool
	fail.Store(true)
	ran := make(chan *Session, 1)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		ran <- s
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate: %v", err)
		}
		return Exited(nil)
	})
	c := e.consumer("acc-enf", 1, r)
	c.NetworkEnforcement = func() error {
		if fail.Load() {
			return broken
		}
		return nil
	}
	err := c.Serve(ctx, id)
	if err == nil || !strings.Contains(err.Error(), broken.Error()) {
		t.Fatalf("Serve = %v, want the enforcement's own reason", err)
	}
	fail.Store(false)
	c = e.consumer("acc-enf", 1, r)
	c.NetworkEnforcement = func() error { return nil }
	if err := c.Serve(ctx, id); err != nil {
		t.Fatalf("Serve = %v", err)
	}
	s := receive(t, ctx, "the runner", ran)
	latest := s.Entry()
	if !Restricted(&s.Claim) || !Restricted(&latest) {
		t.Fatalf("the runner's session %+v is not restricted", s.Claim.Spec)
	}
}

// TestNetworkRefusalPerEntry: a consumer that enforces network policies
// but refuses this entry's (NetworkRefusal) does not claim it, and says
// nothing to the runner; once the refusal is lifted (and the consumer
// woken, as the operator does after a pool's spec changed) it is claimed
// and run.
func TestNetworkRefusalPerEntry(t *testing.T) {
	t.Parallel()
	e := newFleetEnv(t, server.Options{})
	ctx, cancel := testContext(t)
	defer cancel()
	id := e.session(ctx)
	e.restrictEntries()
	var refuse atomic.Bool
	refuse.Store(true)
	var asked atomic.Int32
	ran := make(chan *Session, 1)
	r := runnerFunc(func(ctx context.Context, s *Session) Outcome {
		ran <- s
		if _, err := e.admin.Sessions.Terminate(ctx, s.ID, "done"); err != nil {
			t.Errorf("terminate: %v", err)
		}
		return Exited(nil)
	})
	c := e.consumer("acc-per-entry", 1, r)
	c.NetworkEnforcement = func() error { return nil }
	c.NetworkRefusal = func(q *api.QueueEntry) error {
		if q.Metadata.SessionID != id {
			t.Errorf("asked about %s", q.Metadata.SessionID)
		}
		asked.Add(1)
		if refuse.Load() {
			return errors.New("its hostname rules cannot be enforced here")
		}
		return nil
	}
	done := start(t, ctx, c)
	waitfor.Until(ctx, t, "the refusal asked", func() bool { return asked.Load() > 0 })
	select {
	case <-ran:
		t.Fatal("the runner ran a refused session")
	default:
	}
	if n := held(t, ctx, e.admin, "acc-per-entry"); n != 0 {
		t.Fatalf("the consumer holds %d claims, want none", n)
	}
	refuse.Store(false)
	c.Wake()
	s := receive(t, ctx, "the runner", ran)
	if s.ID != id {
		t.Fatalf("ran %s, want %s", s.ID, id)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
}
