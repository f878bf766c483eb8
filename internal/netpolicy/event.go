package netpolicy

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// EventText is the one-line text of a network transcript event, as the
// CLI and the web UI show it: "deny tcp api.example.test (10.1.2.3:443):
// no rule allows it ×3", "allow tcp 10.1.2.3:443 by ipv4 10.1.0.0/16, 517
// B out, 4.0 KiB in".
func EventText(ev api.Event) string {
	var b strings.Builder
	b.WriteString(ev.Decision + " " + ev.Protocol + " ")
	dest := ev.Address
	if ev.Port != 0 && ev.Address != "" {
		dest = net.JoinHostPort(ev.Address, strconv.Itoa(ev.Port))
	}
	switch {
	case ev.Host != "" && dest != "":
		fmt.Fprintf(&b, "%s (%s)", ev.Host, dest)
	case ev.Host != "":
		b.WriteString(ev.Host)
		if ev.Port != 0 {
			b.WriteString(":" + strconv.Itoa(ev.Port))
		}
	case dest != "":
		b.WriteString(dest)
	default:
		// A worker's count of attempts past its budget of distinct ones.
		b.WriteString("other destinations")
	}
	if ev.Rule != "" {
		if ev.Decision == api.DecisionAllow {
			b.WriteString(" by " + ev.Rule)
		} else {
			b.WriteString(": " + ev.Rule)
		}
	}
	if ev.BytesOut != 0 || ev.BytesIn != 0 {
		fmt.Fprintf(&b, ", %s out, %s in", api.ByteSize(ev.BytesOut), api.ByteSize(ev.BytesIn))
	}
	if ev.Count > 1 {
		fmt.Fprintf(&b, " ×%d", ev.Count)
	}
	return b.String()
}

// RequestText is the one-line text of a network_request transcript event,
// as the CLI and the web UI show it: `network request 3 pending:
// pkg.example.test, *.cdn.example.test — "go mod download"`, `network
// request 3 granted for the session by tok_1`, `network request 3 denied
// by tok_1: use the mirror`.
func RequestText(r api.NetworkRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "network request %s %s", r.ID, r.State)
	switch r.State {
	case api.NetworkRequestPending:
		fmt.Fprintf(&b, ": %s — %q", strings.Join(r.Domains, ", "), r.Reason)
	case api.NetworkRequestGranted:
		fmt.Fprintf(&b, " for the %s", r.Scope)
	}
	if r.AnsweredBy != "" {
		b.WriteString(" by " + r.AnsweredBy)
	}
	if r.Answer != "" {
		b.WriteString(": " + r.Answer)
	}
	return b.String()
}
