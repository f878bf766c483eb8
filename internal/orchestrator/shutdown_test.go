package orchestrator

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
)

// blockingBackend's Provision waits on its context, like an image pull.
type blockingBackend struct{ started chan struct{} }

func (blockingBackend) Name() string { return "blocking" }
func (b blockingBackend) Provision(ctx context.Context, s Spec) (Machine, error) {
	close(b.started)
	<-ctx.Done()
	return nil, ctx.Err()
}
func (blockingBackend) Adopt(context.Context, Spec) (Machine, bool) { return nil, false }
func (blockingBackend) Teardown(context.Context, Spec) error        { return nil }

// TestShutdownDuringProvision: a shutdown while a machine is being
// provisioned cancels the provisioning, and Run returns.
func TestShutdownDuringProvision(t *testing.T) {
	sctx := t.Context()
	c := servertest.Start(t, server.Options{}).Client
	if _, err := c.Outposts.Create(sctx, api.CreateOutpostRequest{Name: "dev", Platform: api.PlatformLinux}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sessions.Create(sctx, api.CreateSessionRequest{Outpost: "dev", Prompt: "x",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}}); err != nil {
		t.Fatal(err)
	}
	b := blockingBackend{started: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Client: c, Outpost: "dev", StateDir: t.TempDir(), Backend: b, RemoteCommand: []string{"/bin/true"},
			PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	}()
	select {
	case <-b.started:
	case <-time.After(20 * time.Second):
		t.Fatal("provision never started")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after shutdown: Provision's context is not cancelled by shutdown")
	}
}
