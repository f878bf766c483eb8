//go:build linux

package egress_test

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"

	"github.com/outpost-sh/outpost/internal/egress"
)

// allowList is a minimal Policy: the names and prefixes it lists, on any port.
type allowList struct {
	names    map[string]bool
	prefixes []netip.Prefix
}

func (a allowList) AllowName(host string, _ uint16) (string, bool) {
	return "hostname " + host, a.names[host]
}

func (a allowList) AllowAddr(addr netip.Addr, _ uint16) (string, bool) {
	for _, p := range a.prefixes {
		if p.Contains(addr) {
			return "address " + p.String(), true
		}
	}
	return "", false
}

func (allowList) Restricted() bool { return true }

// A worker runs a session's command behind a policy: a namespace whose only
// way out is the engine, which lets through the gateway and what the policy
// allows, and reports every decision.
func Example() {
	ctx := context.Background()
	ns, err := egress.NewNamespace(ctx)
	if err != nil {
		slog.Error("no namespace", "err", err) // e.g. not root
		return
	}
	defer ns.Close()
	eng, err := egress.Serve(ctx, ns, egress.Config{
		Policy: allowList{names: map[string]bool{"api.example.test": true}},
		Always: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.10:443")}, // the control plane
		OnDecision: func(d egress.Decision) {
			slog.Info("network", "allow", d.Allow, "host", d.Host, "address", d.Addr, "port", d.Port, "rule", d.Rule)
		},
	})
	if err != nil {
		slog.Error("no engine", "err", err)
		return
	}
	defer eng.Close()
	// The sandbox's /etc/resolv.conf should name the engine (bind-mount
	// this over it); DNS to any other server is answered the same.
	_ = os.WriteFile("/run/session/resolv.conf", ns.ResolvConf(), 0o644)
	cmd := exec.Command("curl", "-sS", "https://api.example.test/")
	if err := ns.Start(cmd); err == nil {
		cmd.Wait()
	}
}
