//go:build linux

package orchestrator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netguard"
)

// TestBwrapRestrictedSandbox: a sandbox given a session's enforcement
// point runs in its namespace, resolves through the engine, reaches the
// gateway on the host's loopback and nothing the policy does not allow.
func TestBwrapRestrictedSandbox(t *testing.T) {
	b := newTestBwrap(t)
	if err := b.EnforcesNetwork(); err != nil {
		t.Skipf("no network enforcement here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer gateway.Close()
	script := `
exec > /workspace/facts 2>&1
echo "netns=$(readlink /proc/self/ns/net)"
echo "resolv=$(grep -m1 '^nameserver' /etc/resolv.conf)"
echo "gateway=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 ` + gateway.URL + `)"
curl -s -o /dev/null --max-time 10 http://198.51.100.7/ && echo address=reached || echo address=refused
getent hosts denied.example.test >/dev/null && echo name=resolved || echo name=refused
echo END`
	s := bwrapSpec(t, "ses_bwnet", "/bin/sh", "-c", script)
	resolv := filepath.Join(s.Workspace, "resolv.conf")
	g, err := netguard.Start(ctx, netguard.Options{Session: s.SessionID, GatewayURL: gateway.URL, ResolvConf: resolv,
		Policy: &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.example.test"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	s.Network, s.ResolvConf = g, resolv
	m, err := b.Provision(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	f := facts(waitFile(t, filepath.Join(s.Workspace, "work", "facts"), 30*time.Second))
	// A child's, not /proc/self's: the main thread may have been left in
	// a namespace a locked goroutine made (the runtime keeps it, idle).
	nsOut, err := exec.Command("readlink", "/proc/self/ns/net").Output()
	if err != nil {
		t.Fatal(err)
	}
	hostNS := strings.TrimSpace(string(nsOut))
	for k, want := range map[string]string{"resolv": "nameserver 10.254.0.1", "gateway": "418", "address": "refused", "name": "refused"} {
		if f[k] != want {
			t.Errorf("%s = %q, want %q", k, f[k], want)
		}
	}
	if !strings.HasPrefix(f["netns"], "net:") || f["netns"] == hostNS {
		t.Errorf("the sandbox's network namespace %q is the orchestrator's (%s)", f["netns"], hostNS)
	}
	<-m.Done()
	if err := b.Teardown(ctx, s); err != nil {
		t.Fatal(err)
	}
}
