//go:build linux

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// credentialProbe is a script step that tries every path session code
// has to a worker's token: every command line and environment in /proc,
// `ps auxeww`, the worker's data dir, its saved login (XDG config dir and
// ~/.config/outpost), its home and its token file. The token is given in
// two halves, so the step's own command line never holds it whole, and
// its working copies stay in the workspace, which it does not search. It
// also reports how many processes it sees and whether a worker is among
// them.
func credentialProbe(token, dataDir, configDir, home, tokenFile string) api.Step {
	half := len(token) / 2
	return execStep(fmt.Sprintf(`a='%s'; b='%s'
n=$PWD/.probe-needle; printf '%%s%%s\n' "$a" "$b" > "$n"
looked=0; found=0
hit() { found=$((found+1)); echo "FOUND in $1"; }
for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
  if tr '\0' '\n' < "$f" > "$n.blob" 2>/dev/null; then
    looked=$((looked+1))
    if grep -qFf "$n" "$n.blob"; then hit "$f"; fi
  fi
done
for d in '%s' '%s' '%s/.config/outpost' '%s' '%s'; do
  if grep -rqsFf "$n" "$d" 2>/dev/null; then hit "$d"; fi
done
if ps auxeww 2>/dev/null | grep -qFf "$n"; then hit "ps auxeww"; fi
if cat '%s/acceptor-id' >/dev/null 2>&1; then echo acceptor_id=readable; else echo acceptor_id=unreadable; fi
w='work'; pattern="${w}er start"; workers=0
for f in /proc/[0-9]*/cmdline; do
  if tr '\0' ' ' < "$f" 2>/dev/null | grep -q "$pattern"; then workers=$((workers+1)); fi
done
rm -f "$n" "$n.blob"
echo "pid1=$(cat /proc/1/comm 2>/dev/null || echo unreadable) processes=$(ls -d /proc/[0-9]* | wc -l) ps_lines=$(ps ax | wc -l) workers=$workers"
echo "probe looked=$looked found=$found"`,
		token[:half], token[half:], dataDir, configDir, home, home, tokenFile, dataDir))
}

// probeResult is what credentialProbe printed.
type probeResult struct {
	looked, found, processes, psLines, workers int
	pid1, acceptorID                           string
	hits                                       []string
}

func parseProbe(t *testing.T, out string) probeResult {
	t.Helper()
	var r probeResult
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "FOUND in "):
			r.hits = append(r.hits, strings.TrimPrefix(line, "FOUND in "))
		case strings.HasPrefix(line, "acceptor_id="):
			r.acceptorID = strings.TrimPrefix(line, "acceptor_id=")
		case strings.HasPrefix(line, "pid1="):
			if _, err := fmt.Sscanf(line, "pid1=%s processes=%d ps_lines=%d workers=%d", &r.pid1, &r.processes, &r.psLines, &r.workers); err != nil {
				t.Fatalf("probe line %q: %v", line, err)
			}
		case strings.HasPrefix(line, "probe "):
			if _, err := fmt.Sscanf(line, "probe looked=%d found=%d", &r.looked, &r.found); err != nil {
				t.Fatalf("probe line %q: %v", line, err)
			}
		}
	}
	if r.looked == 0 || r.pid1 == "" {
		t.Fatalf("the probe did not run:\n%s", out)
	}
	return r
}

// isolationCase is one way of starting the worker.
type isolationCase struct {
	name string
	// args are the worker's extra arguments; "{repo}" is replaced by the
	// directory holding the repository sessions clone.
	args []string
	// asNobody runs the worker itself as nobody.
	asNobody bool
	// root: the case needs the test to run as root.
	root bool
	// log is what the worker's start log must say.
	log string
	// open: session code reaches the token (the probe's proof).
	open bool
	// sandboxed: a bwrap sandbox, whose pid 1 is bwrap's init.
	sandboxed bool
	// owner is who must own the file the session wrote ("" any).
	owner string
	// dedicated: the sessions run as a user made for this case ({user} in
	// args and owner), which the worker may end every process of; it must
	// end one the session leaves behind.
	dedicated bool
}

// TestWorkerIsolation starts a worker with its token in its environment,
// in its saved login, in a file of its data dir (and in --token-file when
// the build has it), and runs a session that clones a repository, runs
// its tests, writes a file, uses a shell (a PTY) and probes every path to
// the token. Under the
// default isolation (auto: bwrap here), bwrap run as nobody, a worker run
// as nobody, and user isolation, nothing yields the token, the session
// sees only its own processes (bwrap) and the worker sees what it wrote;
// under --isolation none the same probe finds the token, so the probe is
// real.
func TestWorkerIsolation(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	c := startCluster(t)
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no nobody user: %v", err)
	}
	// The binary must be reachable by nobody.
	if err := os.Chmod(filepath.Dir(binary), 0o755); err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	help := run(t, nil, "worker", "start", "--help")
	for _, tc := range []isolationCase{
		{name: "default", args: []string{"--bwrap-ro-bind", "{repo}"}, log: "isolation=bwrap", sandboxed: true},
		{name: "bwrap-run-as-nobody", args: []string{"--isolation", "bwrap", "--run-as", "nobody", "--bwrap-ro-bind", "{repo}"},
			root: true, log: "isolation=bwrap", sandboxed: true, owner: "nobody"},
		{name: "worker-as-nobody", args: []string{"--bwrap-ro-bind", "{repo}"}, asNobody: true, root: true,
			log: "isolation=bwrap", sandboxed: true, owner: "nobody"},
		{name: "user", args: []string{"--isolation", "user", "--run-as", "{user}"}, root: true, log: "isolation=user", owner: "{user}", dedicated: true},
		{name: "none", args: []string{"--isolation", "none"}, log: "session isolation is off", open: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root")
			}
			t.Parallel()
			// git refuses a local repository owned by another user.
			repoDir := sharedTempDir(t, "repo")
			repo, err := demo.MakeRepo(t.Context(), repoDir)
			if err != nil {
				t.Fatal(err)
			}
			ownerUID, runAs := nobody.Uid, ""
			if tc.dedicated {
				u := dedicatedUser(t)
				runAs, ownerUID, tc.owner = u.Username, u.Uid, u.Username
				uid, _ := strconv.Atoi(u.Uid)
				gid, _ := strconv.Atoi(u.Gid)
				chownAll(t, repoDir, uid, gid)
			}
			if tc.owner == "nobody" {
				chownAll(t, repoDir, uid, gid)
			}
			outpost := "iso-" + tc.name
			token := setupOutpost(t, c, outpost)
			base := sharedTempDir(t, "worker")
			home, cfg, work, data := filepath.Join(base, "home"), filepath.Join(base, "config"), filepath.Join(base, "work"), filepath.Join(base, "data")
			tokenFile := filepath.Join(data, "token")
			login, _ := json.Marshal(map[string]string{"server": c.url, "token": token})
			for f, content := range map[string][]byte{
				filepath.Join(cfg, "outpost", "config.json"): login, filepath.Join(home, ".config", "outpost", "config.json"): login,
				tokenFile: []byte(token + "\n"),
			} {
				if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(f, content, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(work, 0o755); err != nil {
				t.Fatal(err)
			}
			args := []string{"worker", "start", "--outpost", outpost, "--dir", work, "--data-dir", data}
			if strings.Contains(help, "--token-file") {
				args = append(args, "--token-file", tokenFile)
			}
			for _, a := range tc.args {
				args = append(args, strings.NewReplacer("{repo}", repoDir, "{user}", runAs).Replace(a))
			}
			env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + cfg,
				"OUTPOST_SERVER=" + c.url, "OUTPOST_TOKEN=" + token}
			var cred *syscall.Credential
			if tc.asNobody {
				cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
				chownAll(t, base, uid, gid)
			}
			w := startAs(t, "worker-"+tc.name, env, work, cred, args...)
			waitfor.Within(t, 30*time.Second, "the worker to report its isolation", func() bool { return strings.Contains(w.out.String(), tc.log) })

			steps := []api.Step{
				{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"make test","cwd":"repos/demo"}`)},
				{Tool: api.ToolWriteFile, Args: json.RawMessage(`{"path":"made-in-session.txt","content":"written by the session\n"}`)},
				credentialProbe(token, data, filepath.Join(cfg, "outpost"), home, tokenFile),
				execStep(`echo "whoami=$(id -un 2>/dev/null || id -u) home=$HOME tmp=${TMPDIR:-unset}"`),
				{Tool: api.ToolShellStart, Args: json.RawMessage(`{"name":"sh1"}`)},
				{Tool: api.ToolShellRun, Args: json.RawMessage(`{"name":"sh1","command":"cd repos/demo && echo shell-in-$(basename $(pwd)) on $(tty)"}`)},
			}
			if tc.dedicated {
				steps = append(steps, execStep(`setsid sleep 600 </dev/null >/dev/null 2>&1 & echo "left=$!"`))
			}
			id := createSession(t, c, api.CreateSessionRequest{
				Outpost: outpost, Title: "isolation " + tc.name,
				Repos: []api.Repo{{URL: repo, Name: "demo", Ref: "main"}},
				Agent: api.Agent{Kind: api.AgentScript, Steps: steps},
			})
			requireFinished(t, c.waitFinal(id, 90*time.Second))
			out := sessionOutput(t, c, id)
			if !strings.Contains(out, "running tests") || !strings.Contains(out, "shell-in-demo on /dev/pts/") {
				t.Errorf("the repository's tests or the shell did not run:\n%s", out)
			}
			r := parseProbe(t, out)
			t.Logf("probe: %+v", r)
			if tc.open {
				if r.found == 0 || r.workers == 0 || r.acceptorID != "readable" {
					t.Errorf("without isolation the probe should find the token, the worker and its data dir: %+v\n%s", r, out)
				}
				return
			}
			if r.found != 0 || len(r.hits) > 0 {
				t.Errorf("session code reached the worker's token: %v\n%s", r.hits, out)
			}
			if r.acceptorID != "unreadable" {
				t.Errorf("session code reads the worker's data dir")
			}
			if r.looked < 4 {
				t.Errorf("the probe read %d files of /proc: it proves nothing", r.looked)
			}
			// Another user sees the worker's process (not its environment);
			// a sandbox sees only its own.
			if tc.sandboxed && (r.pid1 != "bwrap" || r.workers != 0 || r.processes > 8 || r.psLines > 10) {
				t.Errorf("the sandbox shows more than its own processes: %+v", r)
			}

			// The worker sees what the session made.
			b, err := os.ReadFile(filepath.Join(work, "made-in-session.txt"))
			if err != nil || string(b) != "written by the session\n" {
				t.Errorf("the session's file on the worker: %q %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(work, "repos", "demo", "Makefile")); err != nil {
				t.Errorf("the clone is not in the workspace: %v", err)
			}
			if tc.owner != "" {
				if got := fileOwner(t, filepath.Join(work, "made-in-session.txt")); got != ownerUID {
					t.Errorf("the session's file belongs to uid %s, want %s (%s)", got, ownerUID, tc.owner)
				}
			}
			if tc.dedicated {
				// The worker ends what the session left running as the user
				// (its next pre-started remote runs as the user too).
				m := regexp.MustCompile(`left=(\d+)`).FindStringSubmatch(out)
				if m == nil {
					t.Fatalf("the session started no process to leave behind:\n%s", out)
				}
				left, _ := strconv.Atoi(m[1])
				waitfor.Within(t, 15*time.Second, "the session's leftover process to end", func() bool { return !slices.Contains(processesOf(ownerUID), left) })
			}
			if m := regexp.MustCompile(`whoami=(\S+)`).FindStringSubmatch(out); tc.owner != "" && (m == nil || m[1] != tc.owner) {
				t.Errorf("session code runs as %v, want %s", m, tc.owner)
			}
		})
	}
}

// dedicatedUser creates a Unix user for one test and deletes it when the
// test ends (the test must be root): a worker in user isolation ends every
// process of its run-as user, so it must never be one that anything else
// runs as (nobody).
func dedicatedUser(t *testing.T) *user.User {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "outpost-e" + hex.EncodeToString(b)
	// useradd fails while another one holds the passwd lock, or when the
	// uid is taken: try again. The uid is drawn at random from a wide range
	// rather than taken as the next free system uid: a uid freed by another
	// test's userdel would otherwise come back at once, and a worker of
	// that test still ending "its" user's processes (kill -9 -1 as the uid)
	// would end this test's.
	var out []byte
	waitfor.Within(t, 30*time.Second, "useradd "+name, func() bool {
		var err error
		uid := 1_000_000 + mrand.IntN(1_000_000_000)
		out, err = exec.Command("useradd", "--system", "--uid", strconv.Itoa(uid), "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		return err == nil
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatalf("look up the new user %s: %v %s", name, err, out)
	}
	t.Cleanup(func() {
		for _, p := range processesOf(u.Uid) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		waitfor.Within(t, 30*time.Second, "userdel "+name, func() bool { return exec.Command("userdel", name).Run() == nil })
	})
	return u
}

// processesOf lists the live processes whose real uid is uid.
func processesOf(uid string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue
		}
		zombie, mine := false, false
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) > 1 && f[0] == "State:":
				zombie = f[1] == "Z"
			case len(f) > 1 && f[0] == "Uid:":
				mine = f[1] == uid
			}
		}
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil && mine && !zombie {
			pids = append(pids, pid)
		}
	}
	return pids
}

// sharedTempDir is a temporary directory that other users can enter
// (t.TempDir's parent is closed to them).
func sharedTempDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "outpost-e2e-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func chownAll(t *testing.T, root string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fileOwner(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid))
}

// startAs is startExact as the user cred (nil: this test's).
func startAs(t *testing.T, name string, env []string, dir string, cred *syscall.Credential, args ...string) *proc {
	t.Helper()
	if cred == nil {
		return startExact(t, name, env, dir, args...)
	}
	p := &proc{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env, p.cmd.Dir = env, dir
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.stop(syscall.SIGTERM, 20*time.Second)
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.out.String())
		}
	})
	return p
}
