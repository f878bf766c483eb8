package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/deploy/systemd"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
)

// installArgs are the flags of an install that works on any machine.
var installArgs = []string{"--executable", "/usr/local/bin/outpost"}

func runInstall(t *testing.T, env map[string]string, args ...string) (*testFactory, int) {
	t.Helper()
	tf := newTestFactory(t, env)
	code := tf.run(t, append(append([]string{"worker", "install"}, installArgs...), args...)...)
	return tf, code
}

// TestWorkerInstallDryRun: --dry-run prints the template unit with this
// executable, the drop-in, the settings and the commands, never the
// token, and writes nothing.
func TestWorkerInstallDryRun(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.outpost(t, "gpu-h200")
	token := ts.token(t, "gpu-h200", api.ScopeMachine)
	tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": token, "OUTPOST_SERVER": ts.url},
		"--outpost", "gpu-h200", "--dry-run", "--executable", "/opt/outpost/bin/outpost")
	out := tf.out.String()
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, tf.errOut)
	}
	for _, want := range []string{
		"Would write /etc/systemd/system/outpost-worker@.service (mode 0644):",
		"    ExecStart=/opt/outpost/bin/outpost worker start --config %E/outpost/worker-%i.yaml",
		"    KillMode=mixed",
		"Would write /etc/systemd/system/outpost-worker@gpu-h200.service.d/install.conf (mode 0644):",
		"Would write /etc/outpost/worker-gpu-h200.env (mode 0600):\n    (holds the token; not shown)",
		"Would write /etc/outpost/worker-gpu-h200.yaml (mode 0640, group outpost):",
		`    server: "` + ts.url + `"`,
		"Would run: systemctl daemon-reload\n\nWould run: systemctl enable outpost-worker@gpu-h200.service\n\nWould run: systemctl restart outpost-worker@gpu-h200.service",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run does not show %q:\n%s", want, out)
		}
	}
	if _, err := user.Lookup(defaultWorkerUser); err != nil && !strings.Contains(out, "Would run: useradd --system --user-group") {
		t.Errorf("no user %s here, so it should be created:\n%s", defaultWorkerUser, out)
	}
	if strings.Contains(out, token) || strings.Contains(tf.errOut.String(), token) {
		t.Errorf("the dry run shows the token:\n%s", out)
	}
	if _, err := os.Stat("/etc/outpost/worker-gpu-h200.yaml"); err == nil {
		t.Error("the dry run wrote /etc/outpost/worker-gpu-h200.yaml")
	}
}

// TestWorkerInstallDropIn: --user, --dir and --token-file go to the
// drop-in: the token file as a credential, never copied.
func TestWorkerInstallDropIn(t *testing.T) {
	t.Parallel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("opt_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tf, code := runInstall(t, nil, "--outpost", "dev", "--dry-run", "--user", "root", "--dir", "/srv/outpost/work", "--token-file", tokenFile, "--skip-server-check")
	out := tf.out.String()
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, tf.errOut)
	}
	for _, want := range []string{
		"    User=root\n    Group=root\n",
		"    ProtectHome=no\n",
		"    WorkingDirectory=/srv/outpost/work\n    ReadWritePaths=/srv/outpost/work\n",
		"    LoadCredential=token:" + tokenFile + "\n    Environment=OUTPOST_TOKEN_FILE=%d/token\n",
		"Would create directory /srv/outpost/work (mode 0700, owner root, group root)",
		"    # server: http://127.0.0.1:7420",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run does not show %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Would write /etc/outpost/worker-dev.env") || strings.Contains(out, "Would run: useradd") {
		t.Errorf("a token file needs no env file, and root exists:\n%s", out)
	}
}

// TestWorkerInstallErrors: what cannot work is a usage error before
// anything is written.
func TestWorkerInstallErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--dry-run"}, nil, "needs --outpost"},
		{[]string{"--outpost", "../etc", "--dry-run"}, nil, "cannot name a systemd unit"},
		{[]string{"--outpost", "dev", "--dry-run"}, nil, "needs its token"},
		{[]string{"--outpost", "dev", "--dry-run", "--dir", "work"}, map[string]string{"OUTPOST_TOKEN": "t"}, "--dir must be an absolute path"},
		{[]string{"--outpost", "dev", "--dry-run", "--user-unit", "--user", "ci"}, map[string]string{"OUTPOST_TOKEN": "t"}, "leave out --user"},
		{[]string{"--outpost", "dev", "--dry-run", "--user", "no-such-user-here"}, map[string]string{"OUTPOST_TOKEN": "t"}, "no such user"},
		{[]string{"--outpost", "dev", "--dry-run", "--token-file", "/no/such/token"}, nil, "--token-file"},
		{[]string{"--outpost", "dev", "--dry-run", "--executable", "/tmp/outpost"}, map[string]string{"OUTPOST_TOKEN": "t"}, "copy it first"},
		{[]string{"--outpost", "dev", "--dry-run", "--system", "--user-unit"}, map[string]string{"OUTPOST_TOKEN": "t"}, "user-unit"},
	} {
		tf, code := runInstall(t, tc.env, tc.args...)
		if code != exitUsage || !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, tf.errOut, exitUsage, tc.want)
		}
		if tf.out.Len() > 0 {
			t.Errorf("%v: printed %q", tc.args, tf.out)
		}
	}
}

// TestWorkerInstallUserUnit: a user unit lives in the user's config
// directory, has neither User= nor the system unit's hardening, and is
// managed with systemctl --user; installing and uninstalling write and
// remove its files.
func TestWorkerInstallUserUnit(t *testing.T) {
	t.Parallel()
	tf := newTestFactory(t, map[string]string{"OUTPOST_TOKEN": "opt_user-unit"})
	o := &WorkerInstallOptions{Outpost: "dev", UserUnit: true, Executable: "/home/ci/bin/outpost"}
	if err := o.resolve(); err != nil {
		t.Fatal(err)
	}
	plan, err := planWorkerInstall(tf.Factory, o)
	if err != nil {
		t.Fatal(err)
	}
	var unit []byte
	var cmds []string
	for i, s := range plan.steps {
		if s.file == filepath.Join(tf.configDir, "systemd", "user", systemd.WorkerUnit) {
			unit = s.data
		}
		if s.cmd != nil {
			cmds = append(cmds, strings.Join(s.cmd, " "))
			plan.steps[i].cmd = []string{"true"} // no user manager here
		}
	}
	for _, bad := range []string{"User=", "Group=", "ProtectSystem", "NoNewPrivileges", "multi-user.target"} {
		if bytes.Contains(unit, []byte(bad)) {
			t.Errorf("the user unit has %s:\n%s", bad, unit)
		}
	}
	if !bytes.Contains(unit, []byte("ExecStart=/home/ci/bin/outpost worker start")) || !bytes.Contains(unit, []byte("WantedBy=default.target")) {
		t.Errorf("user unit:\n%s", unit)
	}
	if !strings.HasPrefix(strings.Join(cmds, "; "), "systemctl --user daemon-reload; systemctl --user enable outpost-worker@dev.service; systemctl --user restart outpost-worker@dev.service") {
		t.Errorf("commands %q", cmds)
	}

	var out bytes.Buffer
	if err := runPlan(context.Background(), &out, plan, false); err != nil {
		t.Fatal(err)
	}
	env := filepath.Join(tf.configDir, "outpost", "worker-dev.env")
	fi, err := os.Stat(env)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("env file %v %v", fi, err)
	}
	if b, _ := os.ReadFile(env); !strings.Contains(string(b), "OUTPOST_TOKEN=opt_user-unit\n") {
		t.Errorf("env file %q", b)
	}
	for _, p := range []string{"outpost/worker-dev.yaml", "systemd/user/outpost-worker@.service", "systemd/user/outpost-worker@dev.service.d/install.conf"} {
		if _, err := os.Stat(filepath.Join(tf.configDir, p)); err != nil {
			t.Errorf("not written: %v", err)
		}
	}
	if !strings.Contains(out.String(), "outpost-worker@dev.service is running") {
		t.Errorf("output %q", out.String())
	}

	un, err := planWorkerUninstall(tf.Factory, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range un.steps {
		if un.steps[i].cmd != nil {
			un.steps[i].cmd = []string{"true"}
		}
	}
	if err := runPlan(context.Background(), &out, un, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"outpost/worker-dev.yaml", "outpost/worker-dev.env", "systemd/user/outpost-worker@dev.service.d"} {
		if _, err := os.Stat(filepath.Join(tf.configDir, p)); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tf.configDir, "systemd/user/outpost-worker@.service")); err != nil {
		t.Errorf("the template must stay for other instances: %v", err)
	}
}

// TestWorkerInstallUnitsVerify: systemd-analyze verify accepts the units
// install writes, system and user, with their drop-ins.
func TestWorkerInstallUnitsVerify(t *testing.T) {
	t.Parallel()
	analyze := systemdAnalyze(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("opt_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, userUnit := range []bool{false, true} {
		tf := newTestFactory(t, map[string]string{"OUTPOST_TOKEN": "opt_verify"})
		o := &WorkerInstallOptions{Outpost: "gpu-h200", UserUnit: userUnit, User: "root", Dir: "/srv/work", TokenFile: tokenFile, Executable: exe}
		if userUnit {
			o.User = ""
		}
		plan, err := planWorkerInstall(tf.Factory, o)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		for _, s := range plan.steps {
			if strings.Contains(s.file, "/systemd/") {
				rel := filepath.Base(s.file)
				if strings.HasSuffix(filepath.Dir(s.file), ".d") {
					rel = filepath.Join(filepath.Base(filepath.Dir(s.file)), rel)
				}
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, rel), s.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		args := []string{"verify", "outpost-worker@gpu-h200.service"}
		if userUnit {
			args = append([]string{"--user"}, args...)
		}
		cmd := exec.Command(analyze, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":", "XDG_RUNTIME_DIR="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze %s (user unit %v): %v\n%s", strings.Join(args, " "), userUnit, err, out)
		}
	}
}

// systemdAnalyze returns the path of systemd-analyze, skipping the test
// without it outside CI (Debian package systemd; scripts/test-deps.sh).
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is missing (Debian package systemd)")
		}
		t.Skip("systemd-analyze is missing (Debian package systemd)")
	}
	return p
}

// installCmd runs `outpost worker install` (or uninstall) with a systemd
// that answers ready, so that a real run reaches the files of a user unit
// under tf's config directory.
func installCmd(t *testing.T, tf *testFactory, uninstall bool, args ...string) int {
	t.Helper()
	run := func(ctx context.Context, o *WorkerInstallOptions) error {
		o.systemd = func(context.Context, bool) error { return nil }
		if uninstall {
			return runWorkerUninstall(ctx, o)
		}
		return runWorkerInstall(ctx, o)
	}
	cmd := NewCmdWorkerInstall(tf.Factory, run)
	if uninstall {
		cmd = NewCmdWorkerUninstall(tf.Factory, run)
	}
	cmd.SetArgs(args)
	cmd.SetOut(tf.out)
	cmd.SetErr(tf.errOut)
	if err := cmd.Execute(); err != nil {
		tf.errOut.WriteString(err.Error())
		return 1
	}
	return 0
}

// TestWorkerInstallChecksToken: install asks the server whether the token
// serves the outpost before it writes anything, dry run or not: the token
// `null` of a wrong jq path, a token of another outpost, one without
// outposts.machine and a missing outpost are refused with the reason.
func TestWorkerInstallChecksToken(t *testing.T) {
	t.Parallel()
	ts := startTestServer(t)
	ts.outpost(t, "gpu")
	ts.outpost(t, "cpu")
	good := ts.token(t, "gpu", api.ScopeMachine)
	for _, tc := range []struct {
		name, token, outpost, want string
	}{
		{"null", "null", "gpu", "The API token is not valid"},
		{"another outpost's", ts.token(t, "cpu", api.ScopeMachine), "gpu", `the token may not serve outpost "gpu" (it is limited to cpu)`},
		{"no machine scope", ts.token(t, "gpu", api.ScopeSessionsRead), "gpu", "without the outposts.machine scope"},
		{"missing outpost", ts.token(t, "", api.ScopeMachine), "gpu-typo", `outpost "gpu-typo" does not exist`},
	} {
		for _, dry := range []bool{true, false} {
			tf := newTestFactory(t, map[string]string{"OUTPOST_TOKEN": tc.token, "OUTPOST_SERVER": ts.url})
			args := []string{"--outpost", tc.outpost, "--user-unit", "--executable", "/usr/local/bin/outpost"}
			if dry {
				args = append(args, "--dry-run")
			}
			if code := installCmd(t, tf, false, args...); code == 0 || !strings.Contains(tf.errOut.String(), tc.want) ||
				!strings.Contains(tf.errOut.String(), "nothing was installed") {
				t.Errorf("%s token (dry run %v): exit %d, stderr %q; want a refusal saying %q", tc.name, dry, code, tf.errOut, tc.want)
			}
			if entries, _ := os.ReadDir(tf.configDir); len(entries) > 0 {
				t.Errorf("%s token (dry run %v): a refused install wrote %v", tc.name, dry, entries)
			}
		}
	}
	// The right token passes; --skip-server-check skips the server.
	tf := newTestFactory(t, map[string]string{"OUTPOST_TOKEN": good, "OUTPOST_SERVER": ts.url})
	if code := installCmd(t, tf, false, "--outpost", "gpu", "--user-unit", "--dry-run", "--executable", "/usr/local/bin/outpost"); code != 0 {
		t.Errorf("a good token: exit %d: %s", code, tf.errOut)
	}
	tf = newTestFactory(t, map[string]string{"OUTPOST_TOKEN": "null", "OUTPOST_SERVER": "http://" + closedAddr(t)})
	if code := installCmd(t, tf, false, "--outpost", "gpu", "--user-unit", "--dry-run", "--skip-server-check", "--executable", "/usr/local/bin/outpost"); code != 0 {
		t.Errorf("--skip-server-check: exit %d: %s", code, tf.errOut)
	}
}

// TestWorkerInstallWithoutSystemd: on a machine not booted with systemd,
// install and uninstall refuse before anything is written or removed and
// say what to do instead; a dry run notes it.
func TestWorkerInstallWithoutSystemd(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := systemdReadyAt(t.Context(), root, false); err == nil || !strings.Contains(err.Error(), "not booted with systemd") {
		t.Fatalf("a root without /run/systemd/system: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "run", "systemd", "system"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := systemdReadyAt(t.Context(), root, false); err != nil {
		t.Fatalf("a root with /run/systemd/system: %v", err)
	}

	noSystemd := func(context.Context, bool) error { return errors.New("this machine was not booted with systemd") }
	for _, uninstall := range []bool{false, true} {
		for _, dry := range []bool{false, true} {
			tf := newTestFactory(t, map[string]string{"OUTPOST_TOKEN": "opt_x"})
			saved := filepath.Join(tf.configDir, "outpost", "worker-dev.yaml")
			if err := os.MkdirAll(filepath.Dir(saved), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(saved, []byte("# the installed settings\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			o := &WorkerInstallOptions{f: tf.Factory, Outpost: "dev", UserUnit: true, DryRun: dry, Executable: "/usr/local/bin/outpost",
				SkipServerCheck: true, systemd: noSystemd}
			run := runWorkerInstall
			if uninstall {
				run = runWorkerUninstall
			}
			err := run(t.Context(), o)
			switch {
			case dry && (err != nil || !strings.Contains(tf.out.String(), "a real install would stop here")):
				t.Errorf("dry run (uninstall %v): %v, out %q; want a note", uninstall, err, tf.out)
			case !dry && (err == nil || !strings.Contains(err.Error(), "nothing was changed") || !strings.Contains(err.Error(), "outpost worker start --outpost dev")):
				t.Errorf("uninstall %v: %v; want a refusal that names the foreground command", uninstall, err)
			}
			if b, err := os.ReadFile(saved); err != nil || string(b) != "# the installed settings\n" {
				t.Errorf("uninstall %v, dry %v: the settings became %q, %v", uninstall, dry, b, err)
			}
			if entries, _ := os.ReadDir(filepath.Join(tf.configDir, "outpost")); len(entries) != 1 {
				t.Errorf("uninstall %v, dry %v: files %v", uninstall, dry, entries)
			}
		}
	}
}

// TestWorkerInstallRollsBack: when a step fails halfway (systemctl enable
// here), what the install did is taken back: files it wrote are removed,
// files it replaced are restored, directories it made are gone.
func TestWorkerInstallRollsBack(t *testing.T) {
	t.Parallel()
	tf := newTestFactory(t, map[string]string{"OUTPOST_TOKEN": "opt_rollback"})
	settings := filepath.Join(tf.configDir, "outpost", "worker-dev.yaml")
	if err := os.MkdirAll(filepath.Dir(settings), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(settings, []byte("# the old settings\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	o := &WorkerInstallOptions{f: tf.Factory, Outpost: "dev", UserUnit: true, Executable: "/usr/local/bin/outpost"}
	plan, err := planWorkerInstall(tf.Factory, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range plan.steps {
		switch {
		case s.cmd != nil && slices.Contains(s.cmd, "enable"):
			plan.steps[i].cmd = []string{"sh", "-c", "echo 'Failed to enable unit' >&2; exit 1"}
		case s.cmd != nil:
			plan.steps[i].cmd = []string{"true"}
		}
	}
	var out bytes.Buffer
	err = runPlan(t.Context(), &out, plan, false)
	if err == nil || !strings.Contains(err.Error(), "Failed to enable unit") || !strings.Contains(err.Error(), "taken back") {
		t.Fatalf("runPlan: %v; want the failure and that it was taken back", err)
	}
	if b, err := os.ReadFile(settings); err != nil || string(b) != "# the old settings\n" {
		t.Errorf("the settings were not restored: %q %v", b, err)
	}
	if fi, _ := os.Stat(settings); fi.Mode().Perm() != 0o640 {
		t.Errorf("restored mode %v", fi.Mode().Perm())
	}
	for _, p := range []string{"outpost/worker-dev.env", "systemd"} {
		if _, err := os.Stat(filepath.Join(tf.configDir, p)); !os.IsNotExist(err) {
			t.Errorf("%s is left after a failed install: %v\n%s", p, err, out.String())
		}
	}
	if !strings.Contains(out.String(), "Took back: wrote ") {
		t.Errorf("output does not say what it took back:\n%s", out.String())
	}
}

// TestWorkerInstallPathsTheUnitReads: a CA file or workspace that the
// system unit's PrivateTmp or ProtectHome would hide, or a CA file the
// worker's user cannot read, is refused before anything is written.
func TestWorkerInstallPathsTheUnitReads(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root for the ownership case")
	}
	ca := tlstest.NewCA(t, "install test CA")
	tmpCA := ca.WriteCA(t, t.TempDir(), "ca.pem") // under /tmp: PrivateTmp
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"CA under /tmp", []string{"--ca-file", tmpCA}, "cannot read the CA file " + tmpCA + ": the unit's PrivateTmp"},
		{"CA under /root", []string{"--ca-file", "/root/ca.pem"}, "cannot read the CA file /root/ca.pem: the unit's ProtectHome"},
		{"workspace under /home", []string{"--dir", "/home/someone/work"}, "cannot use --dir /home/someone/work: the unit's ProtectHome"},
		{"workspace under /var/tmp", []string{"--dir", "/var/tmp/work"}, "PrivateTmp"},
		{"executable under /var/tmp", []string{"--executable", "/var/tmp/outpost"}, "the service cannot run /var/tmp/outpost: the unit's PrivateTmp"},
	} {
		tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, append([]string{"--outpost", "dev", "--dry-run", "--skip-server-check"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(tf.errOut.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", tc.name, code, tf.errOut, exitUsage, tc.want)
		}
		if strings.Contains(tf.out.String(), "Would write") {
			t.Errorf("%s: planned anyway:\n%s", tc.name, tf.out)
		}
	}

	// A CA file only root may read, for a worker running as nobody.
	dir, err := os.MkdirTemp("/var/lib", "outpost-install-test-")
	if err != nil {
		t.Skipf("no writable /var/lib: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// An executable outside /tmp that is a link into it.
	link, target := filepath.Join(dir, "outpost"), filepath.Join(t.TempDir(), "outpost")
	if err := os.WriteFile(target, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--executable", link); code != exitUsage ||
		!strings.Contains(tf.errOut.String(), "the service cannot run "+link+": the unit's PrivateTmp") {
		t.Errorf("an executable linked into /tmp: exit %d, stderr %q", code, tf.errOut)
	}
	// A --dir to be made below a link into /tmp.
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "work")); err != nil {
		t.Fatal(err)
	}
	if tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--dir", filepath.Join(dir, "work", "new")); code != exitUsage ||
		!strings.Contains(tf.errOut.String(), "cannot use --dir "+filepath.Join(dir, "work", "new")+": the unit's PrivateTmp") {
		t.Errorf("a new --dir below a link into /tmp: exit %d, stderr %q", code, tf.errOut)
	}
	// A --dir that is a link (to /etc, say) is refused: the install
	// would give the link's target to the worker's user.
	etc := filepath.Join(dir, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(etc, filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(dir, "planted"), filepath.Join(dir, "planted", "work")} {
		tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--dir", d)
		if want := "--dir " + d + " leads through a link to " + strings.Replace(d, "planted", "etc", 1); code != exitUsage || !strings.Contains(tf.errOut.String(), want) {
			t.Errorf("--dir %s through a link: exit %d, stderr %q; want %q", d, code, tf.errOut, want)
		}
	}
	if tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--dir", filepath.Join(etc, "work")); code != 0 {
		t.Errorf("--dir of the real path: exit %d, stderr %q", code, tf.errOut)
	}
	private := filepath.Join(dir, "ca.pem")
	b, _ := os.ReadFile(tmpCA)
	if err := os.WriteFile(private, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--user", "nobody", "--ca-file", private)
	if code != exitUsage || !strings.Contains(tf.errOut.String(), "the worker's user nobody cannot read the CA file "+private+" (mode 0600)") {
		t.Errorf("a private CA file: exit %d, stderr %q", code, tf.errOut)
	}
	// The default user, made by the install, owns nothing: it reads
	// what others may.
	if _, err := user.Lookup(defaultWorkerUser); err != nil {
		tf, code = runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--ca-file", private)
		if code != exitUsage || !strings.Contains(tf.errOut.String(), "the worker's user "+defaultWorkerUser+" cannot read the CA file "+private+" (mode 0600)") {
			t.Errorf("a private CA file for a user the install makes: exit %d, stderr %q", code, tf.errOut)
		}
	}
	if err := os.Chmod(private, 0o644); err != nil {
		t.Fatal(err)
	}
	// Readable, but in a directory only root may pass through.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tf, code = runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--user", "nobody", "--ca-file", private)
	if code != exitUsage || !strings.Contains(tf.errOut.String(), "the worker's user nobody cannot reach the CA file "+private+": the directory "+dir+" (mode 0700)") {
		t.Errorf("a CA file in a private directory: exit %d, stderr %q", code, tf.errOut)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tf, code = runInstall(t, map[string]string{"OUTPOST_TOKEN": "opt_x"}, "--outpost", "dev", "--dry-run", "--skip-server-check", "--user", "nobody", "--ca-file", private)
	if code != 0 || !strings.Contains(tf.out.String(), `ca-file: "`+private+`"`) {
		t.Errorf("a readable CA file: exit %d, stderr %q\n%s", code, tf.errOut, tf.out)
	}
}

// fakeSystemctl writes a systemctl into a new directory that keeps a
// unit's state in files there (enabled, active), fails the next restart
// when fail-restart exists, and logs each call, one a line, to log.
func fakeSystemctl(t *testing.T) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "systemctl")
	script := `#!/bin/sh
d=$(dirname "$0")
[ "$1" = --user ] && shift
echo "$1" >>"$d/log"
case "$1" in
is-enabled) test -e "$d/enabled" ;;
is-active) test -e "$d/active" ;;
enable) touch "$d/enabled" ;;
disable) rm -f "$d/enabled" ;;
stop) rm -f "$d/active" ;;
restart) rm -f "$d/active"; test -e "$d/fail-restart" && { rm "$d/fail-restart"; echo 'Job failed' >&2; exit 1; }; touch "$d/active" ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

// TestWorkerInstallRollBackKeepsARunningWorker: a reinstall over a worker
// that was enabled and running, whose restart fails, leaves it enabled and
// running again on its old files; a first install that fails the same way
// turns off what it turned on.
func TestWorkerInstallRollBackKeepsARunningWorker(t *testing.T) {
	t.Parallel()
	for _, before := range []bool{true, false} {
		bin, state := fakeSystemctl(t)
		for _, f := range []string{"fail-restart"} {
			if err := os.WriteFile(filepath.Join(state, f), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		tf := newTestFactory(t, map[string]string{"OUTPOST_TOKEN": "opt_reinstall"})
		settings := filepath.Join(tf.configDir, "outpost", "worker-dev.yaml")
		if before {
			for _, f := range []string{"enabled", "active"} {
				if err := os.WriteFile(filepath.Join(state, f), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Dir(settings), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(settings, []byte("# the working settings\n"), 0o640); err != nil {
				t.Fatal(err)
			}
		}
		o := &WorkerInstallOptions{f: tf.Factory, Outpost: "dev", UserUnit: true, Executable: "/usr/local/bin/outpost"}
		plan, err := planWorkerInstall(tf.Factory, o)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range plan.steps {
			switch {
			case s.cmd != nil && s.cmd[0] == "systemctl":
				plan.steps[i].cmd = append([]string{bin}, s.cmd[1:]...)
			case s.cmd != nil:
				plan.steps[i].cmd = []string{"true"}
			}
		}
		var out bytes.Buffer
		if err := runPlan(t.Context(), &out, plan, false); err == nil || !strings.Contains(err.Error(), "Job failed") {
			t.Fatalf("worker before %v: runPlan: %v; want the restart's failure", before, err)
		}
		log, _ := os.ReadFile(filepath.Join(state, "log"))
		_, enabledErr := os.Stat(filepath.Join(state, "enabled"))
		_, activeErr := os.Stat(filepath.Join(state, "active"))
		if before {
			if enabledErr != nil || activeErr != nil {
				t.Errorf("a worker enabled and running before the install is no longer (enabled: %v, running: %v); systemctl calls:\n%s\n%s", enabledErr == nil, activeErr == nil, log, out.String())
			}
			// The rollback's last call restarts the old worker on its
			// restored files, after the reload.
			if !strings.HasSuffix(string(log), "daemon-reload\nrestart\n") || strings.Contains(string(log), "disable") {
				t.Errorf("systemctl calls:\n%s; want the old worker restarted after the reload, and not disabled\n%s", log, out.String())
			}
			if b, err := os.ReadFile(settings); err != nil || string(b) != "# the working settings\n" {
				t.Errorf("the settings were not restored: %q %v", b, err)
			}
			continue
		}
		if enabledErr == nil || activeErr == nil {
			t.Errorf("a failed first install left the unit enabled (%v) or running (%v); systemctl calls:\n%s", enabledErr == nil, activeErr == nil, log)
		}
		if !strings.Contains(string(log), "disable\n") || !strings.Contains(string(log), "stop\n") {
			t.Errorf("systemctl calls:\n%s; want the unit stopped and disabled", log)
		}
	}
}

// TestWorkerInstallRollBackGivesBackADirectory: a --dir that was there
// before, given to the worker's user, goes back to its owner when the
// install is taken back; a directory the install made is removed, even
// when making it failed halfway.
func TestWorkerInstallRollBackGivesBackADirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory away")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	dir := t.TempDir()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, _ := fileOwner(fi)
	s := installStep{dir: dir, mode: 0o700, owner: "nobody"}
	u, err := s.do(t.Context(), io.Discard)
	if err != nil || u == nil {
		t.Fatalf("do: %v, undo %v", err, u)
	}
	if fi, _ := os.Stat(dir); fi != nil {
		if nu, _, _ := fileOwner(fi); strconv.Itoa(int(nu)) != nobody.Uid {
			t.Fatalf("the step did not give %s to nobody", dir)
		}
	}
	if err := rollBack(t.Context(), io.Discard, []undoStep{*u}); err != nil {
		t.Fatal(err)
	}
	fi, err = os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if nu, ng, _ := fileOwner(fi); nu != uid || ng != gid {
		t.Errorf("after the rollback %s is owned by %d:%d, want %d:%d", dir, nu, ng, uid, gid)
	}

	// MkdirAll fails halfway (a name too long for the file system,
	// after its parent was made): what it made goes.
	base := t.TempDir()
	s = installStep{dir: filepath.Join(base, "made", strings.Repeat("x", 300)), mode: 0o700}
	u, err = s.do(t.Context(), io.Discard)
	if err == nil || u == nil {
		t.Fatalf("do: %v, undo %v; want a failure and how to take it back", err, u)
	}
	if _, err := os.Stat(filepath.Join(base, "made")); err != nil {
		t.Fatalf("MkdirAll did not make the parent: %v", err)
	}
	if err := rollBack(t.Context(), io.Discard, []undoStep{*u}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Errorf("after the rollback %s holds %v", base, entries)
	}
}

// TestWorkerInstallRollBackAFailedWrite: a file step whose write fails
// after it made the file's directory (a name too long for a temporary
// file beside it) takes the directory back.
func TestWorkerInstallRollBackAFailedWrite(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	s := installStep{file: filepath.Join(base, "made", strings.Repeat("x", 250)), mode: 0o600, data: []byte("x")}
	u, err := s.do(t.Context(), io.Discard)
	if err == nil || u == nil {
		t.Fatalf("do: %v, undo %v; want a failure and how to take it back", err, u)
	}
	if err := rollBack(t.Context(), io.Discard, []undoStep{*u}); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 0 {
		t.Errorf("after the rollback %s holds %v", base, entries)
	}
}

// TestWorkerInstallRollBackRestoresALink: a settings file that was a link
// (to a file kept elsewhere) is replaced, not written through, and the
// rollback puts the link back, its target untouched.
func TestWorkerInstallRollBackRestoresALink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target, link := filepath.Join(dir, "kept.yaml"), filepath.Join(dir, "worker-dev.yaml")
	if err := os.WriteFile(target, []byte("# kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	u, err := installStep{file: link, mode: 0o640, data: []byte("# new\n")}.do(t.Context(), io.Discard)
	if err != nil || u == nil {
		t.Fatalf("do: %v, undo %v", err, u)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the write did not replace the link: %v %v", fi, err)
	}
	if err := rollBack(t.Context(), io.Discard, []undoStep{*u}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(link); err != nil || got != target {
		t.Errorf("after the rollback %s links to %q (%v), want %s", link, got, err, target)
	}
	if b, _ := os.ReadFile(target); string(b) != "# kept\n" {
		t.Errorf("the link's target became %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("left behind: %v", entries)
	}
}
