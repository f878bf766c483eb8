package client_test

import (
	"encoding/json"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestNetworkRequests answers a script's network access request through
// the SDK while a real remote serves the session: the grant is the
// step's result, a second answer and unknown requests are refused.
func TestNetworkRequests(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, server.Options{}).Client
	ctx := t.Context()
	op := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "*.example.test"}}}
	if _, err := c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "net", NetworkPolicy: op}); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(api.NetworkAccessRequestArgs{Domains: []string{"pkg.other.test"}, Reason: "go mod download"})
	s, err := c.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "net", Title: "t",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolNetworkAccessRequest, Args: args}, {Tool: api.ToolListDir}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.Metadata.SessionID
	claim, err := c.Queue.Claim(ctx, id, "machine-1")
	if err != nil {
		t.Fatal(err)
	}
	serveRemote(t, claim, id)
	waitfor.True(t, "the pending request", func() bool {
		l, err := c.Sessions.Events(ctx, id, 0, 0)
		if err != nil {
			return false
		}
		for _, ev := range l.Items {
			if ev.Type == api.EventNetworkRequest && ev.NetworkRequest.State == api.NetworkRequestPending {
				return true
			}
		}
		return false
	})
	if _, err := c.Sessions.DenyNetworkRequest(ctx, id, "99", ""); !client.IsNotFound(err) {
		t.Errorf("DenyNetworkRequest(99) = %v, want a 404", err)
	}
	got, err := c.Sessions.GrantNetworkRequest(ctx, id, "1", "")
	if err != nil || got.State != api.NetworkRequestGranted || got.Scope != api.NetworkGrantSession {
		t.Fatalf("GrantNetworkRequest = %+v, %v", got, err)
	}
	if _, err := c.Sessions.DenyNetworkRequest(ctx, id, "1", "no"); !client.IsConflict(err) {
		t.Errorf("a second answer = %v, want a 409", err)
	}
	waitfor.True(t, "the session to end", func() bool {
		s, err := c.Sessions.Get(ctx, id)
		return err == nil && api.IsFinal(s.Status.Status)
	})
	s2, err := c.Sessions.Get(ctx, id)
	if err != nil || s2.Status.Status != api.StatusExit || !s2.Spec.NetworkPolicyOwn {
		t.Fatalf("session after the grant: %+v, %v", s2, err)
	}
}
