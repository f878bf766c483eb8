//go:build unix

package worker

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/netguard"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// restrictedEntry is a pending entry whose policy allows one name.
func restrictedEntry(id string) *api.QueueEntry {
	e := pendingEntry(id)
	e.Spec.NetworkPolicy = &api.NetworkPolicy{Enabled: true, Allow: []api.NetworkPolicyRule{{Hostname: "allowed.example.test"}}}
	return e
}

// TestRestrictedSessionNotClaimedWithoutIsolation: a worker without
// isolation says in its heartbeat that it enforces no network policy and
// never claims a restricted session, while it serves an open one.
func TestRestrictedSessionNotClaimedWithoutIsolation(t *testing.T) {
	requireUnix(t)
	fs, c := newFakeServer(t, HostPlatform())
	fs.add(restrictedEntry("sess-r"))
	fs.add(pendingEntry("sess-open"))
	ctx, cancel := testContext(t)
	opts := Options{Client: c, Outpost: "dev", DataDir: t.TempDir(), Dir: t.TempDir(), Logger: testLogger(t),
		RemoteCommand: []string{"true"}, NoPrestart: true, Isolation: IsolationOptions{Mode: IsolationNone},
		HeartbeatInterval: 50 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	waitfor.Until(ctx, t, "the open session served", func() bool {
		_, rel := fs.snapshot()
		return len(rel) > 0
	})
	// The scheduler has run again since; give it a few heartbeats more.
	hb, _ := fs.presence()
	seen := len(hb)
	waitfor.Until(ctx, t, "three more heartbeats", func() bool {
		hb, _ := fs.presence()
		return len(hb) >= seen+3
	})
	if hb[0].Capabilities == nil || hb[0].Capabilities.NetworkPolicy {
		t.Fatalf("heartbeat capabilities %+v: want network_policy false", hb[0].Capabilities)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	for _, cl := range func() []string { cl, _ := fs.snapshot(); return cl }() {
		if strings.HasPrefix(cl, "sess-r ") {
			t.Fatalf("the restricted session was claimed: %q", cl)
		}
	}
}

// netProbe is the remote of TestRestrictedSessionInNamespace: it reports
// its network namespace and resolv.conf, then tries the gateway (always
// reachable), an address no rule allows and a name no rule allows.
const netProbe = `echo "netns=$(readlink /proc/self/ns/net)"
echo "resolv=$(grep -m1 '^nameserver' /etc/resolv.conf)"
curl -s -o /dev/null -w 'gateway=%{http_code}\n' --max-time 10 "$(echo "$OUTPOST_GATEWAY_URL" | sed 's/^ws/http/')"
curl -s -o /dev/null --max-time 10 http://198.51.100.7/ && echo address=reached || echo address=refused
getent hosts denied.example.test >/dev/null && echo name=resolved || echo name=refused
`

// TestRestrictedSessionInNamespace: a worker in bwrap or user isolation
// runs a restricted session's remote in a namespace of its own, whose
// resolv.conf (bwrap) names the engine, which reaches the gateway on the
// host's loopback and nothing the policy does not allow; the denials
// reach the transcript as machine events.
func TestRestrictedSessionInNamespace(t *testing.T) {
	requireUnix(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a restricted session gets a network namespace")
	}
	if err := netguard.Check(context.Background()); err != nil {
		t.Skipf("cannot make network namespaces here: %v", err)
	}
	for _, mode := range []Isolation{IsolationBwrap, IsolationUser} {
		t.Run(string(mode), func(t *testing.T) {
			fs, c := newFakeServer(t, HostPlatform())
			fs.noGatewayURL = true
			fs.add(restrictedEntry("sess-n"))
			ctx, _ := testContext(t)
			var out syncBuffer
			opts := Options{Client: c, Outpost: "dev", DataDir: t.TempDir(), Dir: t.TempDir(), Once: true, Logger: testLogger(t),
				Stdout: &out, GatewayURL: strings.Replace(fs.url, "http", "ws", 1) + "/v1/gateway",
				RemoteCommand: []string{"sh", "-c", netProbe}, Isolation: IsolationOptions{Mode: mode}}
			if mode == IsolationUser {
				u := testSessionUser(t)
				base := sharedTempDir(t)
				opts.DataDir, opts.Dir = base+"/data", base+"/work"
				opts.Isolation.RunAs = u.name
			} else if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
				t.Skip("no bwrap")
			}
			if err := Run(ctx, opts); err != nil {
				t.Fatalf("Run = %v\n%s", err, out.String())
			}
			// A child's, not /proc/self's: the main thread may have been left in
			// a namespace a locked goroutine made (the runtime keeps it, idle).
			nsOut, err := exec.Command("readlink", "/proc/self/ns/net").Output()
			if err != nil {
				t.Fatal(err)
			}
			hostNS := strings.TrimSpace(string(nsOut))
			got := out.String()
			for _, want := range []string{"gateway=404", "address=refused", "name=refused"} {
				if !strings.Contains(got, want) {
					t.Errorf("the remote printed no %q:\n%s", want, got)
				}
			}
			if !strings.Contains(got, "netns=net:") || strings.Contains(got, "netns="+hostNS) {
				t.Errorf("the remote ran in the worker's network namespace %s:\n%s", hostNS, got)
			}
			if mode == IsolationBwrap && !strings.Contains(got, "resolv=nameserver 10.254.0.1") {
				t.Errorf("the sandbox's resolv.conf does not name the engine:\n%s", got)
			}
			var addr, name bool
			for _, d := range fs.decisions() {
				addr = addr || d.Decision == api.DecisionDeny && d.Address == "198.51.100.7" && d.Port == 80
				name = name || d.Decision == api.DecisionDeny && d.Host == "denied.example.test"
			}
			if !addr || !name {
				t.Errorf("decisions posted %+v: want the address and the name denied", fs.decisions())
			}
		})
	}
}
