package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/deploy/systemd"
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
	const token = "opt_install-dry-run-secret"
	tf, code := runInstall(t, map[string]string{"OUTPOST_TOKEN": token, "OUTPOST_SERVER": "https://outpost.example.com"},
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
		`    server: "https://outpost.example.com"`,
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
	tf, code := runInstall(t, nil, "--outpost", "dev", "--dry-run", "--user", "root", "--dir", "/srv/outpost/work", "--token-file", tokenFile)
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
