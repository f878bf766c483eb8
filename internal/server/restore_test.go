package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestWelcomeRestoresReposOnResume runs a session whose planned and
// scripted clones partly fail, lets its claim lapse, and connects a second
// machine: only its welcome lists the repositories to clone again — the
// successful git_clone calls, in order — the resume event names them, and
// the remote's restored notice becomes a restore event.
func TestWelcomeRestoresReposOnResume(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{ClaimTTL: 2 * time.Second, ReconnectGrace: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond})
	ts.outpost("rs")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"rs",
		"repos":[{"url":"https://example.com/app.git","name":"app","ref":"main"}],
		"agent":{"kind":"script","steps":[
			{"tool":"git_clone","args":{"url":"https://example.com/lib.git","name":"lib"}},
			{"tool":"git_clone","args":{"url":"https://example.com/bad.git","name":"bad"},"continue_on_error":true},
			{"tool":"list_dir"},
			{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	gw := ts.srv.gatewayURL

	claim := ts.claimFor(id, "m1")
	r, _ := dialGateway(t, gw, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	if w := r.expect(api.FrameWelcome); w.Restore != nil {
		t.Fatalf("the first machine is asked to restore %+v", w.Restore)
	}
	for seq := int64(1); seq <= 3; seq++ {
		call := r.expect(api.FrameCall)
		if call.Seq != seq {
			t.Fatalf("call %+v, want seq %d", call, seq)
		}
		ok := seq != 3 // the clone of "bad" fails
		r.send(api.Frame{Type: api.FrameResult, Seq: seq, OK: ok, Error: map[bool]string{false: "git clone: exit status 128"}[ok], Value: json.RawMessage(`{}`)})
		r.expect(api.FrameAck)
	}
	r.expect(api.FrameCall) // call 4 stays unanswered: the machine dies
	r.close()
	waitLapsed(t, ts, id)

	claim2 := ts.claimFor(id, "m2")
	r2, _ := dialGateway(t, gw, id, claim2.Status.ConnectToken)
	r2.send(api.Frame{Type: api.FrameHello, SessionID: id})
	w := r2.expect(api.FrameWelcome)
	want := []api.GitCloneArgs{
		{URL: "https://example.com/app.git", Name: "app", Ref: "main"},
		{URL: "https://example.com/lib.git", Name: "lib"},
	}
	if !reflect.DeepEqual(w.Restore, want) {
		t.Fatalf("welcome restore = %+v, want %+v", w.Restore, want)
	}
	r2.send(api.Frame{Type: api.FrameRestored, Restored: []api.RestoredRepo{
		{Name: "app", URL: want[0].URL, Ref: "main", Head: "0123456789abcdef"},
		{Name: "lib", URL: want[1].URL, Error: "git clone: exit status 128: fatal: unable to access"},
	}})
	if call := r2.expect(api.FrameCall); call.Seq != 4 {
		t.Fatalf("resumed call %+v, want seq 4", call)
	}

	var restore, resume api.Event
	waitfor.True(t, "the restore event", func() bool {
		var evs api.EventList
		ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events?limit=1000", ts.admin, nil, &evs)
		for _, ev := range evs.Items {
			switch ev.Type {
			case api.EventRestore:
				restore = ev
			case api.EventResume:
				resume = ev
			}
		}
		return restore.Seq != 0
	})
	if !strings.Contains(resume.Reason, "(app, lib) are cloned again") || !strings.Contains(resume.Reason, "uncommitted work") {
		t.Errorf("resume reason = %q", resume.Reason)
	}
	if !strings.Contains(restore.Reason, "Restored 1 repository on the new machine: app (main @ 0123456)") ||
		!strings.Contains(restore.Reason, "lib (git clone: exit status 128") || restore.OK == nil || *restore.OK || restore.AcceptorID != "m2" {
		t.Errorf("restore event = %+v", restore)
	}

	// A reconnect of the resumed machine's remote gets the list again (it
	// restores once per process and keeps what is there).
	r2.ws.CloseNow()
	r3, _ := dialGateway(t, gw, id, claim2.Status.ConnectToken)
	r3.send(api.Frame{Type: api.FrameHello, SessionID: id})
	if w := r3.expect(api.FrameWelcome); len(w.Restore) != 2 {
		t.Fatalf("welcome after a reconnect = %+v", w.Restore)
	}
}

func TestRestoreReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     []api.RestoredRepo
		want   string
		wantOK bool
	}{
		{[]api.RestoredRepo{{Name: "app", Ref: "main", Head: "abcdef0123"}, {Name: "lib", Head: "1234567890"}},
			"Restored 2 repositories on the new machine: app (main @ abcdef0), lib (1234567).", true},
		{[]api.RestoredRepo{{Name: "app", Kept: true}, {Name: "x", Error: "boom"}},
			"Already there and left as they were: app. Could not restore a repository; calls that use it will fail: x (boom).", false},
	} {
		got, ok := restoreReason(tc.in)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("restoreReason(%+v) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}
