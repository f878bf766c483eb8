package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/remote"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// These tests run the client against a real Outpost server in this
// process, on loopback, and a real remote for the calls that need a
// machine.

func TestOutpostsUpdate(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, server.Options{}).Client
	ctx := t.Context()
	if _, err := c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "gpu", MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	two := 2
	o, err := c.Outposts.Update(ctx, "gpu", api.UpdateOutpostRequest{MaxRunning: &two})
	if err != nil || o.Spec.MaxRunning != 2 || o.Spec.MaxAttempts != 5 {
		t.Fatalf("Update(max_running 2) = %+v, %v; want max_running 2 and max_attempts kept at 5", o, err)
	}
	if got, err := c.Outposts.Get(ctx, "gpu"); err != nil || got.Spec.MaxRunning != 2 {
		t.Fatalf("Get after Update = %+v, %v", got, err)
	}

	bad := -1
	if _, err := c.Outposts.Update(ctx, "gpu", api.UpdateOutpostRequest{MaxRunning: &bad}); !client.IsBadRequest(err) {
		t.Errorf("Update(max_running -1) = %v, want a 400", err)
	}
	if got, err := c.Outposts.Get(ctx, "gpu"); err != nil || got.Spec.MaxRunning != 2 {
		t.Errorf("a refused Update changed the outpost: %+v, %v", got, err)
	}
	if _, err := c.Outposts.Update(ctx, "nope", api.UpdateOutpostRequest{MaxRunning: &two}); !client.IsNotFound(err) {
		t.Errorf("Update of a missing outpost = %v, want a 404", err)
	}
	tok, err := c.Tokens.Create(ctx, api.CreateTokenRequest{Name: "gpu-only", Scopes: []string{api.ScopeOrchestrator}, Outpost: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	limited, err := client.New(c.BaseURL(), tok.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := limited.Outposts.Update(ctx, "gpu", api.UpdateOutpostRequest{MaxRunning: &two}); !client.IsForbidden(err) {
		t.Errorf("Update with a token limited to the outpost = %v, want a 403", err)
	}
}

// TestSessionsCallToolAndSpilledOutput drives an external session as its
// agent: tool calls through CallTool, the output of a call past the
// transcript's cap through SpilledOutput, and the end through end_session.
func TestSessionsCallToolAndSpilledOutput(t *testing.T) {
	t.Parallel()
	const transcriptCap = 4096
	c := servertest.Start(t, server.Options{OutputCapBytes: transcriptCap}).Client
	ctx := t.Context()
	if _, err := c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "dev"}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "dev", Agent: api.Agent{Kind: api.AgentExternal}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.Metadata.SessionID

	// Before a machine serves the session, a call is not made.
	if _, err := c.Sessions.CallTool(ctx, id, api.ToolExec, api.ExecArgs{Command: "true"}); !client.IsUnavailable(err) {
		t.Fatalf("CallTool before a machine connected = %v, want a 503", err)
	}
	claim, err := c.Queue.Claim(ctx, id, "machine-1")
	if err != nil {
		t.Fatal(err)
	}
	serveRemote(t, claim, id)

	var res *api.ToolResult
	waitfor.True(t, "the remote to answer a call", func() bool {
		res, err = c.Sessions.CallTool(ctx, id, api.ToolExec, api.ExecArgs{Command: "echo hello from the client"})
		if client.IsUnavailable(err) {
			return false
		}
		if err != nil {
			t.Fatalf("CallTool(exec) = %v", err)
		}
		return true
	})
	if !res.OK || !strings.Contains(res.Output, "hello from the client") || res.Seq <= 0 {
		t.Fatalf("CallTool(exec) = %+v", res)
	}
	small := res.Seq

	res, err = c.Sessions.CallTool(ctx, id, api.ToolReadFile, api.ReadFileArgs{Path: "no/such/file"})
	if err != nil || res.OK || res.Error == "" {
		t.Errorf("CallTool(read_file of a missing file) = %+v, %v; want a failed result saying why", res, err)
	}
	if _, err := c.Sessions.CallTool(ctx, id, "rm_rf", nil); !client.IsBadRequest(err) {
		t.Errorf("CallTool of an unknown tool = %v, want a 400", err)
	}

	const total = 10000
	res, err = c.Sessions.CallTool(ctx, id, api.ToolExec, api.ExecArgs{Command: "head -c 10000 /dev/zero | tr '\\0' a"})
	if err != nil || !res.OK {
		t.Fatalf("CallTool(exec of %d bytes) = %+v, %v", total, res, err)
	}
	var spilled bytes.Buffer
	waitfor.True(t, "the spilled output to be kept", func() bool {
		spilled.Reset()
		err := c.Sessions.SpilledOutput(ctx, id, res.Seq, &spilled)
		if client.IsNotFound(err) {
			return false
		}
		if err != nil {
			t.Fatalf("SpilledOutput = %v", err)
		}
		return true
	})
	if spilled.Len() != total-transcriptCap || strings.Trim(spilled.String(), "a") != "" {
		t.Errorf("SpilledOutput wrote %d bytes (%.20q…), want the %d past the transcript's cap, all a", spilled.Len(), spilled.String(), total-transcriptCap)
	}
	if err := c.Sessions.SpilledOutput(ctx, id, small, io.Discard); !client.IsNotFound(err) {
		t.Errorf("SpilledOutput of a call that spilled nothing = %v, want a 404", err)
	}

	// nil is no arguments: list_dir then lists the workspace.
	if res, err := c.Sessions.CallTool(ctx, id, api.ToolListDir, nil); err != nil || !res.OK {
		t.Errorf("CallTool(list_dir, nil) = %+v, %v", res, err)
	}
	// end_session takes no arguments.
	if _, err := c.Sessions.CallTool(ctx, id, "end_session", nil); err != nil {
		t.Fatalf("CallTool(end_session) = %v", err)
	}
	waitfor.True(t, "the session to end", func() bool {
		s, err := c.Sessions.Get(ctx, id)
		return err == nil && api.IsFinal(s.Status.Status)
	})
}

// serveRemote runs a real remote for the claimed session in this process
// until the test ends.
func serveRemote(t *testing.T, claim *api.QueueEntry, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- remote.Serve(ctx, remote.Options{
			GatewayURL:   claim.Status.GatewayURL,
			ConnectToken: claim.Status.ConnectToken,
			SessionID:    id,
			StateDir:     t.TempDir(),
			WorkDir:      t.TempDir(),
			Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
			Capabilities: &api.Capabilities{OS: "test", Tools: api.ToolNames()},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("remote: %v", err)
		}
	})
}
