//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// tokenProbe is a program session code runs to look for a connect token
// (the "opc_" prefix, spelled in two halves so the probe's own command line
// does not hold it) wherever a process of its sandbox keeps one: every
// process's environment and command line, the regular files (bwrap's
// argument memfd among them) every process holds open, and the whole
// memory of pid 1, bwrap's init. It prints the places it found one in and
// how many of pid 1's memory regions it could read.
const tokenProbe = `
import os, stat
needle = b"op" + b"c_"
hits, regions = [], 0
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for name in ("environ", "cmdline"):
        try:
            if needle in open("/proc/%s/%s" % (pid, name), "rb").read():
                hits.append("%s/%s" % (pid, name))
        except OSError:
            pass
    try:
        fds = os.listdir("/proc/%s/fd" % pid)
    except OSError:
        fds = []
    for fd in fds:
        path = "/proc/%s/fd/%s" % (pid, fd)
        try:
            if stat.S_ISREG(os.stat(path).st_mode) and needle in open(path, "rb").read(1 << 22):
                hits.append(path)
        except OSError:
            pass
try:
    with open("/proc/1/mem", "rb") as mem:
        for line in open("/proc/1/maps"):
            lo, hi = [int(x, 16) for x in line.split()[0].split("-")]
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            regions += 1
            if needle in data:
                hits.append("1/mem " + line.split()[-1])
except OSError as e:
    print("pid 1 memory:", e)
print("token-probe hits=%s regions=%d" % (",".join(hits) or "none", regions))
`

// TestConnectTokenNotInSandboxWithoutPrestart runs a session under bwrap
// whose remote the worker starts at claim time — on a worker that
// pre-starts none (--no-prestart), and for a session pinned to another
// remote build, which a pre-started remote never serves: session code
// looks for its connect token in every process's environment and command
// line, in the files they hold open (bwrap's --args memfd) and in the
// memory of the sandbox's pid 1, and finds it nowhere, because the token
// reaches the remote over its standard input as it does a pre-started
// one, never through bwrap (the pinned build is executed with it by this
// build's remote, inside the sandbox).
func TestConnectTokenNotInSandboxWithoutPrestart(t *testing.T) {
	requireBwrap(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 for the probe")
	}
	for _, tc := range []struct {
		name   string
		pinned bool
	}{{"no-prestart", false}, {"pinned-build", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c *cluster
			var token string
			extra := []string{"--no-prestart"}
			if tc.pinned {
				suffix := dist.HostSuffix()
				if suffix == "" {
					t.Skip("no distribution platform for this machine")
				}
				distDir, _ := pinnedDistDir(t, suffix)
				c = startCluster(t, "--dist-dir", distDir)
				token = pinnedOutpost(t, c, "handover", pinnedID)
				extra = []string{"--cache-dir", t.TempDir()}
			} else {
				c = startCluster(t)
				token = setupOutpost(t, c, "handover")
			}
			work, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
			w := start(t, "worker", append(c.env(token), api.EnvWorkerIsolation.Name+"=bwrap"),
				append([]string{"worker", "start", "--outpost", "handover", "--dir", work, "--data-dir", data}, extra...)...)
			waitfor.Within(t, 60*time.Second, "the worker to report its isolation", func() bool { return strings.Contains(w.out.String(), "isolation=bwrap") })
			args, _ := json.Marshal(api.ExecArgs{Command: "/usr/bin/python3 -c '" + tokenProbe + "'", TimeoutS: 120})
			id := createSession(t, c, api.CreateSessionRequest{Outpost: "handover", Title: "token probe",
				Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: args}}}})
			s := c.waitFinal(id, 120*time.Second)
			out := sessionOutput(t, c, id)
			m := regexp.MustCompile(`token-probe hits=(.+) regions=(\d+)`).FindStringSubmatch(out)
			if s.Status.Status != api.StatusExit || m == nil {
				t.Fatalf("session ended %s: %s; output:\n%s", s.Status.Status, s.Status.Reason, out)
			}
			t.Logf("probe: %s", m[0])
			if m[1] != "none" {
				t.Errorf("session code found its connect token in %s", m[1])
			}
			if tc.pinned && (s.Status.Capabilities == nil || s.Status.Capabilities.RemoteVersion != pinnedVersion) {
				t.Errorf("session served by remote %+v, want the pinned build %s", s.Status.Capabilities, pinnedVersion)
			}
		})
	}
}
