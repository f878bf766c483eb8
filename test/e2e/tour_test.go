//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tourMarker precedes each shell block of README.md that belongs to the
// tour; TestReadmeTour runs exactly those blocks, in order.
const tourMarker = "<!-- tour -->"

// tourAddr is the server address the README's tour uses; the test gives
// the server a free port instead and rewrites the address in the commands.
const tourAddr = "127.0.0.1:7420"

// keepsRunning ends a tour line whose command serves until stopped (it
// runs in a terminal of its own); the test starts it in the background.
var keepsRunning = regexp.MustCompile(`\s+# keeps running\b.*$`)

// tourReady says when each long-running command of the tour is ready for
// the next: a line in its output.
var tourReady = []struct{ command, line string }{
	{"outpost up", "Press Ctrl-C to stop."},
	{"outpost worker start", "worker ready"},
}

// tourSecret is the secret of the tour's session: it must be redacted
// from everything the tour shows.
const tourSecret = "s3cr3t-d3pl0y-k3y"

// TestReadmeTour runs the tour of README.md as a newcomer types it: one
// fresh shell with an empty HOME and no outpost on its PATH, in a
// directory standing for the checkout. `go install ./cmd/outpost` puts
// the binary under test where go install would, so the README's own PATH
// line is what finds it; commands marked "# keeps running" (outpost up,
// the worker) run in the background until the end. The session must end
// `exit (finished)` with its diff shown and its secret redacted, under the
// worker's default isolation (a bwrap sandbox where bubblewrap works), and
// again when the tour's session is created a second time.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := tourBlocks(t, string(readme))
	if len(blocks) < 4 {
		t.Fatalf("README.md has %d blocks marked %s, want the tour's (at least 4)", len(blocks), tourMarker)
	}
	t.Run("this-user", func(t *testing.T) {
		t.Parallel()
		runTour(t, blocks, nil)
	})
	t.Run("non-root", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("the test runs as a user already")
		}
		nobody, err := user.Lookup("nobody")
		if err != nil {
			t.Skipf("no nobody user: %v", err)
		}
		t.Parallel()
		uid, _ := strconv.Atoi(nobody.Uid)
		gid, _ := strconv.Atoi(nobody.Gid)
		// nobody copies the binary under test.
		if err := os.Chmod(filepath.Dir(binary), 0o755); err != nil {
			t.Fatal(err)
		}
		runTour(t, blocks, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)})
	})
}

// runTour runs the tour's blocks as the user cred (nil: this test's) and
// checks what it shows.
func runTour(t *testing.T, blocks []string, cred *syscall.Credential) {
	root := t.TempDir()
	if cred != nil {
		root = sharedTempDir(t, "tour")
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	home, checkout, logs := filepath.Join(root, "home"), filepath.Join(root, "checkout"), filepath.Join(root, "logs")
	for _, d := range []string{home, checkout, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	addr := freeAddr(t)
	script, bg := tourScript(t, blocks, addr)
	scriptFile := filepath.Join(root, "tour.sh")
	if err := os.WriteFile(scriptFile, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", scriptFile)
	cmd.Dir = checkout
	cmd.Env = tourEnv(t, home, addr, logs, cred != nil)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	// The background commands share the shell's process group: a shell
	// that overruns takes them all with it.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	bgLogs := func() string {
		var b strings.Builder
		for i := range bg {
			raw, _ := os.ReadFile(filepath.Join(logs, fmt.Sprintf("bg%d.log", i+1)))
			fmt.Fprintf(&b, "--- %s ---\n%s\n", bg[i], raw)
		}
		return b.String()
	}
	if runErr != nil {
		t.Fatalf("the tour failed: %v\n--- script ---\n%s\n--- output ---\n%s\n%s", runErr, script, out.String(), bgLogs())
	}
	transcript := out.String()
	for _, want := range []string{
		"$ cat README.md", "This greeting says foo.", "+This greeting says bar.", "[REDACTED:API_KEY]",
		"session ended: exit (finished)",
	} {
		if !strings.Contains(transcript, want) {
			t.Errorf("the tour's output lacks %q", want)
		}
	}
	if n := len(regexp.MustCompile(`Status:\s+exit \(finished\)`).FindAllString(transcript, -1)); n != 2 {
		t.Errorf("outpost sessions get shows %d sessions finished, want the tour's session and its second run", n)
	}
	for _, want := range []string{"session ended: exit (finished)", "+This greeting says bar.", "This greeting says foo."} {
		if n := strings.Count(transcript, want); n < 2 {
			t.Errorf("the tour's output has %q %d times, want it from both runs", want, n)
		}
	}
	background := bgLogs()
	if strings.Contains(transcript+background, tourSecret) {
		t.Errorf("the session's secret shows in the tour's output or logs")
	}
	switch {
	case strings.Contains(background, "isolation=bwrap"):
	case os.Getenv("CI") != "":
		t.Errorf("CI runs the tour without a bwrap sandbox, where it must work")
	default:
		t.Logf("bubblewrap cannot sandbox here: the tour ran without a sandbox")
	}
	for _, want := range []string{"machine checks", "git=ok", "workspace=ok"} {
		if !strings.Contains(background, want) {
			t.Errorf("the worker's start lacks %q", want)
		}
	}
	// outpost doctor, as the README runs it on the worker's machine.
	for _, want := range []string{"ok    token", `"box-1"`, "limited to outpost dev-boxes", "ok    outpost     dev-boxes"} {
		if !strings.Contains(transcript, want) {
			t.Errorf("outpost doctor's output lacks %q", want)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("--- output ---\n%s\n%s", transcript, background)
	}
}

// tourBlocks returns the shell blocks of readme that follow tourMarker.
func tourBlocks(t *testing.T, readme string) []string {
	t.Helper()
	var blocks []string
	for _, part := range strings.Split(readme, tourMarker)[1:] {
		part = strings.TrimLeft(part, "\n")
		body, ok := strings.CutPrefix(part, "```sh\n")
		if !ok {
			t.Fatalf("%s is not followed by a ```sh block: %.60q", tourMarker, part)
		}
		body, _, ok = strings.Cut(body, "\n```")
		if !ok {
			t.Fatalf("a tour block does not end: %.60q", part)
		}
		blocks = append(blocks, body+"\n")
	}
	return blocks
}

// tourScript turns the tour's blocks into one bash script and lists its
// background commands (their output goes to $TOUR_LOGS/bgN.log).
func tourScript(t *testing.T, blocks []string, addr string) (string, []string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`set -euo pipefail
tour_pids=()
# tour_stop stops the background commands, the last started first.
tour_stop() {
  # Only those still running (jobs -pr: not yet reaped, so the pid is
  # still theirs, not a stranger's that reused it).
  local running=" $(jobs -pr | tr '\n' ' ') "
  for ((i = ${#tour_pids[@]} - 1; i >= 0; i--)); do
    if [[ $running == *" ${tour_pids[i]} "* ]]; then kill -TERM "${tour_pids[i]}" 2>/dev/null || true; fi
  done
  wait
}
trap tour_stop EXIT
# tour_ready LOG LINE waits up to two minutes for LINE in LOG.
tour_ready() {
  for _ in $(seq 1200); do
    if grep -qF -- "$2" "$1"; then return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2; return 1
}
set -x
`)
	var bg []string
	installs := 0
	for _, block := range blocks {
		for _, line := range strings.SplitAfter(block, "\n") {
			line = strings.ReplaceAll(line, tourAddr, addr)
			switch trimmed := strings.TrimSpace(line); {
			case trimmed == "go install ./cmd/outpost":
				// The binary under test, where go install puts it.
				b.WriteString(`mkdir -p "$(go env GOPATH)/bin" && cp "$TOUR_BINARY" "$(go env GOPATH)/bin/outpost"` + "\n")
				installs++
			case keepsRunning.MatchString(trimmed):
				command := keepsRunning.ReplaceAllString(trimmed, "")
				ready := ""
				for _, r := range tourReady {
					if strings.Contains(command, r.command) {
						ready = r.line
					}
				}
				if ready == "" {
					t.Fatalf("the tour runs %q in the background, but the test does not know when it is ready", command)
				}
				bg = append(bg, command)
				log := fmt.Sprintf(`"$TOUR_LOGS/bg%d.log"`, len(bg))
				fmt.Fprintf(&b, "%s >%s 2>&1 &\ntour_pids+=($!)\ntour_ready %s %q\n", command, log, log, ready)
			default:
				b.WriteString(line)
			}
		}
	}
	if installs != 1 {
		t.Fatalf("the tour has %d lines 'go install ./cmd/outpost', want 1", installs)
	}
	// The tour a second time: the same session again on the same worker,
	// whose --keep-workspace keeps the first session's clone. It must
	// start from the ref's clean tree, not the first session's edits.
	again := 0
	for _, block := range blocks {
		if strings.Contains(block, "outpost sessions create") {
			b.WriteString(strings.ReplaceAll(block, tourAddr, addr))
			again++
		}
	}
	if again != 1 {
		t.Fatalf("the tour has %d blocks that create a session, want 1", again)
	}
	return b.String(), bg
}

// tourEnv is a fresh shell's environment: an empty HOME, a PATH with go
// but no outpost, and nothing of Outpost's or Go's settings; nobody's
// when nobody is set.
func tourEnv(t *testing.T, home, addr, logs string, nobody bool) []string {
	t.Helper()
	var path []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "outpost")); err == nil {
			continue
		}
		path = append(path, dir)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the tour needs go on PATH: %v", err)
	}
	path = append(path, filepath.Dir(goBin))
	env := []string{
		"PATH=" + strings.Join(path, string(os.PathListSeparator)),
		"HOME=" + home,
		"LANG=C.UTF-8",
		// The test's server address; the README's is the default.
		"OUTPOST_LISTEN=" + addr,
		"TOUR_BINARY=" + binary,
		"TOUR_LOGS=" + logs,
	}
	if nobody {
		env = append(env, "USER=nobody", "LOGNAME=nobody")
	}
	for _, k := range []string{"USER", "LOGNAME", "TMPDIR", "CI"} {
		if nobody && (k == "USER" || k == "LOGNAME") {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
