package fleet

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSpawnEnvIsClean: a remote gets the spawn contract and a few system
// variables, never the consumer's token or other secrets.
func TestSpawnEnvIsClean(t *testing.T) {
	t.Parallel()
	host := map[string]string{
		"PATH": "/usr/bin", "HOME": "/home/u", "USER": "u", "LANG": "C.UTF-8", "DISPLAY": ":0",
		"OUTPOST_CHROME_PATH": "/usr/bin/chromium",
		"OUTPOST_TOKEN":       "secret", "OUTPOST_SERVER": "http://x", "AWS_SECRET_ACCESS_KEY": "k",
		"OUTPOST_WORKER_ACCEPTOR_ID": "w", "TZ": "",
		// Public names pass through under the Outpost name; Outpost names win.
		"DEVIN_CHROME_PATH": "/opt/chrome", "DEVIN_OUTPOST_DESKTOP": "true",
		"DEVIN_OUTPOSTS_TOKEN": "secret", "DEVIN_REMOTE_SESSION_TOKEN": "secret-ct",
	}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	claim := &api.QueueEntry{Metadata: api.QueueMetadata{SessionID: "sess-1"}}
	claim.Status.GatewayURL, claim.Status.ConnectToken = "wss://gw", "ct-9"

	got := SpawnEnv(claim, "/data/sessions/sess-1", lookup)
	want := []string{
		"DISPLAY=:0", "HOME=/home/u", "LANG=C.UTF-8",
		"OUTPOST_CHROME_PATH=/usr/bin/chromium", "OUTPOST_CONNECT_TOKEN=ct-9", "OUTPOST_DESKTOP=true",
		"OUTPOST_GATEWAY_URL=wss://gw", "OUTPOST_SESSION_ID=sess-1",
		"OUTPOST_STATE_DIR=/data/sessions/sess-1", "PATH=/usr/bin", "USER=u",
	}
	if runtime.GOOS != "windows" && !slices.Equal(got, want) {
		t.Errorf("SpawnEnv =\n%q\nwant\n%q", got, want)
	}
	for _, kv := range got {
		if strings.Contains(kv, "secret") || strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "OUTPOST_TOKEN") || strings.HasPrefix(kv, "DEVIN_") {
			t.Errorf("SpawnEnv leaks %q", kv)
		}
	}

	// The CA file: from the worker's environment, or from its flag.
	host[EnvCAFile] = "/etc/outpost/env-ca.pem"
	if got := SpawnEnv(claim, "/d", lookup); !slices.Contains(got, "OUTPOST_CA_FILE=/etc/outpost/env-ca.pem") {
		t.Errorf("the worker's OUTPOST_CA_FILE is not passed on: %q", got)
	}
	got = SpawnEnv(claim, "/d", LookupWithCAFile(lookup, "/etc/outpost/flag-ca.pem"))
	if !slices.Contains(got, "OUTPOST_CA_FILE=/etc/outpost/flag-ca.pem") || slices.Contains(got, "OUTPOST_CA_FILE=/etc/outpost/env-ca.pem") {
		t.Errorf("the --ca-file is not passed on in place of the environment's: %q", got)
	}
}

// TestSpawnEnvEgressProxy: a host's own proxy variables never reach a
// remote; the egress proxy its consumer names does, under every name
// programs read, with the consumer's NO_PROXY.
func TestSpawnEnvEgressProxy(t *testing.T) {
	t.Parallel()
	host := map[string]string{"PATH": "/usr/bin", "HTTPS_PROXY": "http://corp:3128", "NO_PROXY": "gw.example"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	claim := &api.QueueEntry{Metadata: api.QueueMetadata{SessionID: "sess-1"}}
	for _, kv := range SpawnEnv(claim, "/d", lookup) {
		if strings.Contains(strings.ToUpper(kv), "PROXY") {
			t.Errorf("a host proxy variable reached the remote: %q", kv)
		}
	}
	host[EnvEgressProxy] = "http://sess-1:pw@egress:3128"
	got := SpawnEnv(claim, "/d", lookup)
	for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"} {
		if !slices.Contains(got, k+"=http://sess-1:pw@egress:3128") {
			t.Errorf("%s is not the egress proxy: %q", k, got)
		}
	}
	if !slices.Contains(got, "NO_PROXY=gw.example") {
		t.Errorf("NO_PROXY not passed on: %q", got)
	}
	if slices.Contains(got, EnvEgressProxy+"=http://sess-1:pw@egress:3128") {
		t.Errorf("%s itself need not reach the remote: %q", EnvEgressProxy, got)
	}
}

// TestSpawnEnvDesktop: a claim whose outpost gives its sessions a desktop
// (spec.desktop) starts the remote with OUTPOST_DESKTOP=true, whatever the
// consumer's own environment says; without it, the environment decides.
func TestSpawnEnvDesktop(t *testing.T) {
	t.Parallel()
	lookup := func(string) (string, bool) { return "", false }
	claim := &api.QueueEntry{Metadata: api.QueueMetadata{SessionID: "sess-1"}}
	if got := SpawnEnv(claim, "/d", lookup); slices.ContainsFunc(got, func(kv string) bool { return strings.HasPrefix(kv, "OUTPOST_DESKTOP=") }) {
		t.Errorf("a claim without spec.desktop got a desktop: %q", got)
	}
	claim.Spec.Desktop = true
	if got := SpawnEnv(claim, "/d", lookup); !slices.Contains(got, "OUTPOST_DESKTOP=true") {
		t.Errorf("a claim with spec.desktop: %q, want OUTPOST_DESKTOP=true", got)
	}
	off := func(k string) (string, bool) { return "false", k == "OUTPOST_DESKTOP" }
	if got := SpawnEnv(claim, "/d", off); !slices.Contains(got, "OUTPOST_DESKTOP=true") || slices.Contains(got, "OUTPOST_DESKTOP=false") {
		t.Errorf("spec.desktop under OUTPOST_DESKTOP=false: %q", got)
	}
}
