//go:build linux

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/dist"
)

// Ids of the second build the distribution tests publish: pinnedID names it
// as it is; tamperedID a copy whose check line is of the untouched bytes.
const (
	pinnedID      = "0e2e0000beef"
	tamperedID    = "0e2e0000bad0"
	pinnedVersion = "e2e-pinned-" + pinnedID
	pinnedLDFlags = "-X github.com/outpost-sh/outpost/internal/dist.buildID=" + pinnedID +
		" -X github.com/outpost-sh/outpost/internal/machine.Version=" + pinnedVersion
)

// pinnedBuild is a second build of outpost, differing from the one under
// test only in its version id and remote version, built once per run.
var pinnedBuild = sync.OnceValues(func() (string, error) {
	out := filepath.Join(filepath.Dir(binary), "outpost-pinned")
	args := append(append([]string{"build"}, buildFlags...), "-ldflags", pinnedLDFlags, "-o", out, "../../cmd/outpost")
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the pinned outpost: %w\n%s", err, b)
	}
	return out, nil
})

func fileSHA(t *testing.T, b []byte) string {
	t.Helper()
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// download GETs a URL without a token and returns the body.
func download(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return b
}

// pinnedDistDir writes a dist dir with the pinned build and a tampered copy.
func pinnedDistDir(t *testing.T, suffix string) (dir string, pinned []byte) {
	t.Helper()
	path, err := pinnedBuild()
	if err != nil {
		t.Fatal(err)
	}
	if pinned, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(dist.BinaryName(pinnedID, suffix), pinned)
	write(dist.ChecksumName(pinnedID, suffix), []byte(dist.CheckLine(fileSHA(t, pinned), suffix)))
	write(dist.BinaryName(tamperedID, suffix), append(append([]byte(nil), pinned...), "tampered"...))
	write(dist.ChecksumName(tamperedID, suffix), []byte(dist.CheckLine(fileSHA(t, pinned), suffix)))
	return dir, pinned
}

// pinnedOutpost creates an outpost through the CLI, pinned when pin is set,
// and returns a machine token for it.
func pinnedOutpost(t *testing.T, c *cluster, name, pin string) string {
	t.Helper()
	args := []string{"outposts", "create", name, "--platform", "linux"}
	if pin != "" {
		args = append(args, "--remote-binary-sha", pin)
	}
	var o api.Outpost
	if err := json.Unmarshal([]byte(run(t, c.env(c.admin), append(args, "-o", "json")...)), &o); err != nil {
		t.Fatal(err)
	}
	if pin != "" && (o.Spec.RemoteBinarySHA == nil || *o.Spec.RemoteBinarySHA != pin) {
		t.Fatalf("outpost %s pin = %v, want %s", name, o.Spec.RemoteBinarySHA, pin)
	}
	var tok api.CreateTokenResponse
	raw := run(t, c.env(c.admin), "tokens", "create", "--scope", api.ScopeMachine, "--outpost", name, "--name", "w-"+name, "-o", "json")
	if err := json.Unmarshal([]byte(raw), &tok); err != nil {
		t.Fatal(err)
	}
	return tok.Secret
}

// echoSession is a one-step script session request.
func echoSession(outpost, pin string) api.CreateSessionRequest {
	return api.CreateSessionRequest{Outpost: outpost, Title: "which remote", RemoteBinarySHA: pin,
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"echo served"}`)}}}}
}

// TestDistPinnedRemote: a server publishing a dist dir with a second build,
// an outpost pinned to it, and a worker that downloads, verifies and runs
// that build as `devin-remote serve`; a session pinning the worker's own
// build runs the worker itself.
func TestDistPinnedRemote(t *testing.T) {
	t.Parallel()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no distribution platform for this machine")
	}
	distDir, pinned := pinnedDistDir(t, suffix)
	c := startCluster(t, "--dist-dir", distDir)
	base := c.url + "/dist/"
	selfID := strings.TrimSpace(string(download(t, base+dist.LatestName(suffix))))
	if !dist.ValidID(selfID) || selfID == pinnedID {
		t.Fatalf("latest = %q, want the server's own id", selfID)
	}

	// The published check lines pass `sha256sum -c` once the binary is
	// saved as devin-remote: the dist dir's build and the server's own.
	if _, err := exec.LookPath("sha256sum"); err == nil {
		for _, id := range []string{pinnedID, selfID} {
			dir := t.TempDir()
			bin := download(t, base+dist.BinaryName(id, suffix))
			check := download(t, base+dist.ChecksumName(id, suffix))
			if id == pinnedID && string(bin) != string(pinned) {
				t.Errorf("published %s differs from the dist dir's file", id)
			}
			os.WriteFile(filepath.Join(dir, "devin-remote"), bin, 0o755)
			os.WriteFile(filepath.Join(dir, "check.sha256"), check, 0o644)
			cmd := exec.Command("sha256sum", "-c", "check.sha256")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "devin-remote: OK" {
				t.Errorf("sha256sum -c of %s: %v: %s", id, err, out)
			}
		}
	}

	token := pinnedOutpost(t, c, "pinned", pinnedID)
	cache := t.TempDir()
	worker, _ := startWorker(t, c, "pinned", token, "--cache-dir", cache)

	// The outpost's pin: the worker downloads the second build and runs it.
	id := createSession(t, c, echoSession("pinned", ""))
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("pinned session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if s.Status.Capabilities == nil || s.Status.Capabilities.RemoteVersion != pinnedVersion {
		t.Errorf("pinned session served by remote %+v, want version %s", s.Status.Capabilities, pinnedVersion)
	}
	cached, err := os.ReadFile(dist.CachedPath(cache, pinnedID, suffix))
	if err != nil || fileSHA(t, cached) != fileSHA(t, pinned) {
		t.Errorf("cached build: %v", err)
	}
	if !strings.Contains(worker.out.String(), "remote build downloaded and verified") {
		t.Errorf("the worker did not say it downloaded the build:\n%s", worker.out.String())
	}

	// A session's own pin beats its outpost's: this one pins the worker's
	// build, which the worker runs itself.
	id = createSession(t, c, echoSession("pinned", selfID))
	s = c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.Capabilities == nil || s.Status.Capabilities.RemoteVersion == pinnedVersion {
		t.Errorf("self-pinned session ended %s with remote %+v, want the worker's own build", s.Status.Status, s.Status.Capabilities)
	}
	if s.Spec.RemoteBinarySHA == nil || *s.Spec.RemoteBinarySHA != selfID {
		t.Errorf("session spec pin = %v", s.Spec.RemoteBinarySHA)
	}
}

// TestDistTamperedRemote: a pinned build whose bytes do not match its
// published check line is refused with an error naming the build, its URL
// and both hashes; nothing runs and the session goes back to the queue.
func TestDistTamperedRemote(t *testing.T) {
	t.Parallel()
	suffix := dist.HostSuffix()
	if suffix == "" {
		t.Skip("no distribution platform for this machine")
	}
	distDir, pinned := pinnedDistDir(t, suffix)
	c := startCluster(t, "--dist-dir", distDir)
	token := pinnedOutpost(t, c, "plain", "")
	id := createSession(t, c, echoSession("plain", tamperedID))
	var e api.QueueEntry
	if code := c.api("GET", "/opbeta/outposts/devins/"+id, token, nil, &e); code != 200 || e.Spec.RemoteBinarySHA == nil || *e.Spec.RemoteBinarySHA != tamperedID {
		t.Fatalf("queue entry %d: spec.remote_binary_sha = %v, want %s", code, e.Spec.RemoteBinarySHA, tamperedID)
	}

	cache := t.TempDir()
	worker, _ := startWorker(t, c, "plain", token, "--cache-dir", cache)
	select {
	case <-worker.done:
	case <-time.After(90 * time.Second):
		t.Fatal("the worker went on after refusing the build")
	}
	out := worker.out.String()
	tampered, _ := os.ReadFile(filepath.Join(distDir, dist.BinaryName(tamperedID, suffix)))
	for _, want := range []string{
		tamperedID, c.url + "/dist/" + dist.BinaryName(tamperedID, suffix), "refusing to run it",
		"SHA-256 " + fileSHA(t, tampered), "says " + fileSHA(t, pinned),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("worker output does not say %q:\n%s", want, out)
		}
	}
	if worker.err == nil {
		t.Error("the worker exited 0 after refusing the build")
	}
	s := c.session(id)
	if s.Status.Status != api.StatusNew || s.Status.Capabilities != nil || !strings.Contains(s.Status.Reason, "refusing to run it") {
		t.Errorf("session after the refusal: %s, capabilities %+v, reason %q", s.Status.Status, s.Status.Capabilities, s.Status.Reason)
	}
	if _, err := os.Stat(dist.CachedPath(cache, tamperedID, suffix)); !os.IsNotExist(err) {
		t.Errorf("the tampered build is in the cache: %v", err)
	}
}

// TestDevinRemoteName: the binary invoked as devin-remote is `outpost remote`.
func TestDevinRemoteName(t *testing.T) {
	t.Parallel()
	link := filepath.Join(t.TempDir(), "devin-remote")
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(link, "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "outpost remote [command]") {
		t.Errorf("devin-remote --help: %v\n%s", err, out)
	}
	// Setup scripts check the remote's build this way.
	out, err = exec.Command(link, "--version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "outpost ") || strings.Count(string(out), "\n") != 1 {
		t.Errorf("devin-remote --version: %v\n%s", err, out)
	}
	// serve without the spawn contract's variables says which are missing.
	cmd := exec.Command(link, "serve")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "OUTPOST_GATEWAY_URL") {
		t.Errorf("devin-remote serve without env: %v\n%s", err, out)
	}
}
