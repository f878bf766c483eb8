package client_test

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/server"
	"github.com/outpost-sh/outpost/internal/servertest"
)

// TestNetworkPolicies sets an outpost's policy, narrows a session's, and
// reports a network decision as the claim's holder, all through the SDK
// against a real server.
func TestNetworkPolicies(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, server.Options{}).Client
	ctx := t.Context()
	op := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "*.example.test"}}}
	if _, err := c.Outposts.Create(ctx, api.CreateOutpostRequest{Name: "net", NetworkPolicy: op}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Sessions.Create(ctx, api.CreateSessionRequest{Outpost: "net", Title: "t",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: "exec", Args: []byte(`{"command":"true"}`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := s.Metadata.SessionID
	narrow := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "a.example.test", Ports: []int{443}}}}
	got, err := c.Sessions.Update(ctx, id, api.UpdateSessionRequest{NetworkPolicy: narrow})
	if err != nil || !got.Spec.NetworkPolicyOwn || got.Spec.NetworkPolicy.Allow[0].Hostname != "a.example.test" {
		t.Fatalf("Update(narrow) = %+v, %v", got, err)
	}
	// Widening needs network.admin, which the admin token implies.
	tok, err := c.Tokens.Create(ctx, api.CreateTokenRequest{Name: "writer", Scopes: []string{api.ScopeSessionsWrite}})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := client.New(c.BaseURL(), tok.Secret)
	if err != nil {
		t.Fatal(err)
	}
	wide := &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "*.test"}}}
	if _, err := writer.Sessions.Update(ctx, id, api.UpdateSessionRequest{NetworkPolicy: wide}); !client.IsForbidden(err) {
		t.Errorf("Update(wide) without network.admin = %v, want a 403", err)
	}
	if got, err := c.Sessions.Update(ctx, id, api.UpdateSessionRequest{NetworkPolicy: wide}); err != nil || got.Spec.NetworkPolicy.Allow[0].Hostname != "*.test" {
		t.Errorf("Update(wide) with admin = %+v, %v", got, err)
	}
	if got, err = c.Sessions.Update(ctx, id, api.UpdateSessionRequest{}); err != nil || got.Spec.NetworkPolicyOwn || got.Spec.NetworkPolicy.Allow[0].Hostname != "*.example.test" {
		t.Fatalf("Update(null) = %+v, %v; want the outpost's policy", got, err)
	}

	if _, err := c.Queue.Claim(ctx, id, "w1"); err != nil {
		t.Fatal(err)
	}
	ev, err := c.Queue.MachineEvent(ctx, id, api.MachineEventRequest{AcceptorID: "w1", Network: []api.NetworkDecision{
		{Decision: api.DecisionDeny, Address: "192.0.2.1", Port: 22, Protocol: api.ProtocolTCP, Rule: "no rule allows it"}}})
	if err != nil || ev.Type != api.EventNetwork || ev.Decision != api.DecisionDeny || ev.Port != 22 {
		t.Fatalf("MachineEvent(network) = %+v, %v", ev, err)
	}
}
