package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/remote"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestGatewayServesPreviousProtocolVersion runs a session end to end with
// the real remote speaking the version before the current one, as a remote
// of the previous release does. The remote refuses any frame of another
// version than its own, so the session ending well shows the server spoke
// that version throughout; its log shows it saw no frame it did not know.
func TestGatewayServesPreviousProtocolVersion(t *testing.T) {
	t.Parallel()
	old := api.CurrentProtocolVersion - 1
	if !old.Supported() {
		t.Fatalf("version %d, the one before the current, is not supported", old)
	}
	ts := startServer(t, Options{})
	ts.outpost("old")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"old","agent":{"kind":"script","steps":[
		{"tool":"exec","args":{"command":"echo from-an-older-remote"}},
		{"tool":"list_dir"}]}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m1")
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{
			GatewayURL:      ts.srv.gatewayURL,
			ConnectToken:    claim.Status.ConnectToken,
			SessionID:       id,
			StateDir:        t.TempDir(),
			WorkDir:         t.TempDir(),
			Logger:          slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Capabilities:    &api.Capabilities{OS: "test", Tools: api.ToolNames()},
			ProtocolVersion: old,
		})
	}()
	if end := waitEnded(t, ts, id); end.Status.Status != api.StatusExit {
		t.Fatalf("session ended %+v", end.Status)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the version %d remote: %v\n%s", old, err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the remote did not exit after the session ended")
	}
	log := logs.String()
	if !strings.Contains(log, fmt.Sprintf("protocol_version=%d", old)) {
		t.Errorf("the remote did not speak version %d:\n%s", old, log)
	}
	if strings.Contains(log, "unknown frame") || strings.Contains(log, "version mismatch") {
		t.Errorf("the server sent the version %d remote something it did not know:\n%s", old, log)
	}
	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
	results := 0
	for _, ev := range evs.Items {
		if ev.Type == api.EventResult {
			results++
			if ev.OK == nil || !*ev.OK {
				t.Errorf("result %+v", ev)
			}
		}
	}
	if results != 2 {
		t.Errorf("%d results, want 2", results)
	}
}

// helloRaw sends a hello of version v (and instance) and returns the answer.
func (r *fakeRemote) helloRaw(v int, sessionID, instance string) api.Frame {
	r.t.Helper()
	b, _ := json.Marshal(api.Frame{V: v, Type: api.FrameHello, SessionID: sessionID, Instance: instance})
	if err := r.ws.Write(context.Background(), websocket.MessageText, b); err != nil {
		r.t.Fatal(err)
	}
	f, err := r.recv()
	if err != nil {
		r.t.Fatalf("answer to a version %d hello: %v", v, err)
	}
	return f
}

// TestGatewayRefusesOtherVersions: a hello of a version outside
// [MinProtocolVersion, CurrentProtocolVersion], or of none, is answered
// with an error frame naming the remote's version and the server's range,
// saying which side to upgrade; a version 2 hello must name its instance,
// while a version 1 hello is served without one.
func TestGatewayRefusesOtherVersions(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("v")
	s := ts.session("v")
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m")
	accepts := fmt.Sprintf("accepts gateway protocol versions %d to %d", api.MinProtocolVersion, api.CurrentProtocolVersion)
	for _, c := range []struct {
		v        int
		instance string
		want     []string
	}{
		{0, "i", []string{"names no gateway protocol version", accepts}},
		{int(api.MinProtocolVersion) - 1, "i", []string{accepts}},
		{int(api.CurrentProtocolVersion) + 1, "i", []string{fmt.Sprintf("speaks gateway protocol version %d", api.CurrentProtocolVersion+1), accepts, "upgrade the server"}},
		{-3, "i", []string{"version -3", accepts, "upgrade the remote"}},
		{int(api.InstanceRequiredSince), "", []string{"must name the remote's instance"}},
	} {
		r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
		f := r.helloRaw(c.v, id, c.instance)
		if f.Type != api.FrameError {
			t.Errorf("v %d: answered %+v, want an error", c.v, f)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(f.Reason, w) {
				t.Errorf("v %d: reason %q does not say %q", c.v, f.Reason, w)
			}
		}
		// In range, the refusal is in the remote's version; else in the server's.
		wantV := int(api.CurrentProtocolVersion)
		if api.ProtocolVersion(c.v).Supported() {
			wantV = c.v
		}
		if f.V != wantV {
			t.Errorf("v %d: error frame of version %d, want %d", c.v, f.V, wantV)
		}
		r.close()
	}
	// Version 1 without an instance: welcomed, in version 1.
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	if f := r.helloRaw(1, id, ""); f.Type != api.FrameWelcome || f.V != 1 {
		t.Fatalf("a version 1 hello without an instance: %+v, want a version 1 welcome", f)
	}
	if f := r.expect(api.FrameCall); f.V != 1 {
		t.Errorf("call to a version 1 remote of version %d", f.V)
	}
}
