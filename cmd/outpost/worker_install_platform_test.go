package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// platformInstall runs worker install or uninstall planned for goos, with a
// token in the environment and no server check.
func platformInstall(t *testing.T, env map[string]string, args ...string) (*testFactory, int) {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["OUTPOST_TOKEN"]; !ok {
		env["OUTPOST_TOKEN"] = "op_test_token"
	}
	tf := newTestFactory(t, env)
	code := tf.run(t, append([]string{"worker"}, args...)...)
	return tf, code
}

// TestWorkerInstallWindowsDryRun: the Windows plan — the directories
// under %ProgramData%\outpost, the token file for LocalSystem and the
// administrators, the settings, the service with its command line and
// recovery actions, its start — as golden output, and the token never
// printed.
func TestWorkerInstallWindowsDryRun(t *testing.T) {
	t.Parallel()
	tf, code := platformInstall(t, map[string]string{"ProgramData": `D:\Data`},
		"install", "--for-os", "windows", "--dry-run", "--skip-server-check", "--outpost", "win-x64",
		"--server", "https://outpost.example.com", "--executable", `C:\Program Files\Outpost\outpost.exe`)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, tf.out, tf.errOut)
	}
	goldenCompare(t, "worker-install-windows.golden", tf.out.String())
	if strings.Contains(tf.out.String(), "op_test_token") {
		t.Error("the dry run printed the token")
	}

	tf, code = platformInstall(t, nil, "install", "--for-os", "windows", "--dry-run", "--skip-server-check", "--outpost", "win",
		"--executable", `C:\Program Files\Outpost\outpost.exe`, "--token-file", `C:\secrets\win.token`, "--log-file", `C:\logs\win.log`)
	out := tf.out.String()
	if code != 0 || strings.Contains(out, "write the token") || !strings.Contains(out, `--token-file C:\secrets\win.token`) ||
		!strings.Contains(out, `--log-file C:\logs\win.log`) || !strings.Contains(out, "Logs:         the file of --log-file") {
		t.Errorf("with --token-file and --log-file: exit %d:\n%s%s", code, out, tf.errOut)
	}
}

// TestWorkerUninstallWindowsDryRun: uninstall stops and deletes the
// service and removes the settings and token file, keeping the workspace.
func TestWorkerUninstallWindowsDryRun(t *testing.T) {
	t.Parallel()
	tf, code := platformInstall(t, nil, "uninstall", "--for-os", "windows", "--dry-run", "--outpost", "win")
	out := tf.out.String()
	for _, want := range []string{
		"Would stop and delete the service outpost-worker-win",
		`Would remove C:\ProgramData\outpost\worker-win.yaml`,
		`Would remove C:\ProgramData\outpost\worker-win.token`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("uninstall dry run lacks %q (exit %d):\n%s%s", want, code, out, tf.errOut)
		}
	}
	if strings.Contains(out, "workspace-win") {
		t.Errorf("uninstall would touch the workspace:\n%s", out)
	}
}

// TestWorkerInstallLaunchdDryRun: the LaunchDaemon plan (root-owned plist
// in /Library/LaunchDaemons, the job's user owning its workspace, data,
// log directory and token) and the LaunchAgent plan (the user's Library,
// the gui/UID domain), as golden output with the machine's own users
// written as $USER, $GROUP and $HOME.
func TestWorkerInstallLaunchdDryRun(t *testing.T) {
	t.Parallel()
	daemonUser, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody here to run the daemon as")
	}
	tf, code := platformInstall(t, nil, "install", "--for-os", "darwin", "--dry-run", "--skip-server-check", "--outpost", "minis",
		"--server", "https://outpost.example.com", "--executable", "/usr/local/bin/outpost", "--user", "nobody")
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, tf.out, tf.errOut)
	}
	goldenCompare(t, "worker-install-launchdaemon.golden", normalizeUser(daemonUser, tf.out.String()))

	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	tf, code = platformInstall(t, nil, "install", "--for-os", "darwin", "--dry-run", "--skip-server-check", "--outpost", "sims",
		"--server", "https://outpost.example.com", "--executable", "/usr/local/bin/outpost", "--launch-agent")
	if code != 0 {
		t.Fatalf("agent: exit %d: %s%s", code, tf.out, tf.errOut)
	}
	goldenCompare(t, "worker-install-launchagent.golden", normalizeUser(me, tf.out.String()))
}

// normalizeUser writes u's home, uid, name and group as variables.
func normalizeUser(u *user.User, s string) string {
	s = strings.ReplaceAll(s, u.HomeDir, "$HOME")
	s = strings.ReplaceAll(s, "gui/"+u.Uid+"/", "gui/$UID/")
	s = strings.ReplaceAll(s, "gui/"+u.Uid+" ", "gui/$UID ")
	if g, err := user.LookupGroupId(u.Gid); err == nil {
		s = strings.ReplaceAll(s, "group "+g.Name+")", "group $GROUP)")
	}
	return strings.ReplaceAll(s, "owner "+u.Username+",", "owner $USER,")
}

// TestWorkerUninstallLaunchdDryRun: uninstall boots the job out and
// removes its plist, settings and token, for a daemon and an agent.
func TestWorkerUninstallLaunchdDryRun(t *testing.T) {
	t.Parallel()
	tf, code := platformInstall(t, nil, "uninstall", "--for-os", "darwin", "--dry-run", "--outpost", "minis")
	out := tf.out.String()
	for _, want := range []string{
		"Would run: launchctl bootout system/sh.outpost.worker.minis",
		"Would remove /Library/LaunchDaemons/sh.outpost.worker.minis.plist",
		"Would remove /etc/outpost/worker-minis.yaml",
		"Would remove /etc/outpost/worker-minis.token",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("daemon uninstall lacks %q (exit %d):\n%s%s", want, code, out, tf.errOut)
		}
	}
	tf, code = platformInstall(t, nil, "uninstall", "--for-os", "darwin", "--dry-run", "--outpost", "sims", "--launch-agent")
	out = tf.out.String()
	if code != 0 || !strings.Contains(out, "Would run: launchctl bootout gui/") || !strings.Contains(out, "/Library/LaunchAgents/sh.outpost.worker.sims.plist") {
		t.Errorf("agent uninstall: exit %d:\n%s%s", code, out, tf.errOut)
	}
}

// TestWorkerInstallPlatformRefusals: what a Windows service or launchd job
// cannot take is refused with a sentence, before anything is planned.
func TestWorkerInstallPlatformRefusals(t *testing.T) {
	t.Parallel()
	exe := []string{"--executable", `C:\Program Files\Outpost\outpost.exe`}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"exe in a profile", nil, []string{"--for-os", "windows", "--executable", `C:\Users\bob\Downloads\outpost.exe`},
			"it is in a user's profile"},
		{"exe in temp", map[string]string{"TEMP": `C:\Windows\Temp`}, []string{"--for-os", "windows", "--executable", `c:\windows\temp\outpost.exe`},
			"it is in the temporary directory"},
		{"relative exe", nil, []string{"--for-os", "windows", "--executable", `outpost.exe`}, "--executable must be an absolute path"},
		{"relative dir", nil, append([]string{"--for-os", "windows", "--dir", `work`}, exe...), "--dir must be an absolute path"},
		{"user on windows", nil, append([]string{"--for-os", "windows", "--user", "bob"}, exe...), "runs as LocalSystem"},
		{"agent on windows", nil, append([]string{"--for-os", "windows", "--launch-agent"}, exe...), "--launch-agent is macOS's"},
		{"user-unit on darwin", nil, []string{"--for-os", "darwin", "--user-unit", "--executable", "/usr/local/bin/outpost"}, "are systemd's"},
		{"daemon as root", map[string]string{"SUDO_USER": "root"}, []string{"--for-os", "darwin", "--executable", "/usr/local/bin/outpost"}, "not root: pass --user NAME"},
		{"no such user", nil, []string{"--for-os", "darwin", "--user", "no-such-user-here", "--executable", "/usr/local/bin/outpost"}, "no such user"},
		{"agent flags on linux", nil, []string{"--for-os", "linux", "--launch-agent", "--executable", "/usr/local/bin/outpost"}, "are for macOS and Windows"},
		{"bad os", nil, []string{"--for-os", "plan9"}, "--for-os must be linux, darwin or windows"},
		{"no token", map[string]string{"OUTPOST_TOKEN": ""}, append([]string{"--for-os", "windows"}, exe...), "the worker needs its token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"install", "--outpost", "x", "--dry-run", "--skip-server-check"}, tc.args...)
			tf, code := platformInstall(t, tc.env, args...)
			if code == 0 || !strings.Contains(tf.errOut.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q (stdout %q)", code, tf.errOut, tc.want, tf.out)
			}
		})
	}
	// Planning another system's service is for dry runs only.
	tf, code := platformInstall(t, nil, "install", "--outpost", "x", "--for-os", "windows", "--skip-server-check")
	if code == 0 || !strings.Contains(tf.errOut.String(), "it needs --dry-run") {
		t.Errorf("--for-os without --dry-run: exit %d, %s", code, tf.errOut)
	}
}

// TestRunPlanTakesBackCalls: a step done by a function (the service
// manager's) is taken back, with the files written before it, when a later
// step fails; a call that fails reports what it was doing.
func TestRunPlanTakesBackCalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	settings := filepath.Join(dir, "conf", "worker-x.yaml")
	var undone []string
	p := &installPlan{steps: []installStep{
		{file: settings, mode: 0o640, data: []byte("server: x\n")},
		{what: "create the service x", call: func(context.Context) (*undoStep, error) {
			return &undoStep{what: "created the service x", do: func(context.Context) error {
				undone = append(undone, "service")
				return nil
			}}, nil
		}},
		{what: "start the service x", call: func(context.Context) (*undoStep, error) {
			return nil, errors.New("the service x stopped right after it started")
		}},
	}}
	var out bytes.Buffer
	err := runPlan(context.Background(), &out, p, false)
	if err == nil || !strings.Contains(err.Error(), "start the service x: the service x stopped") || !strings.Contains(err.Error(), "taken back") {
		t.Fatalf("runPlan = %v; want the start's failure, taken back", err)
	}
	if len(undone) != 1 {
		t.Errorf("the service was taken back %d times; want once", len(undone))
	}
	if _, err := os.Stat(settings); !os.IsNotExist(err) {
		t.Errorf("the settings file is still there after the rollback: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(settings)); !os.IsNotExist(err) {
		t.Errorf("the directory the install made is still there: %v", err)
	}
	if !strings.Contains(out.String(), "Did: create the service x") || !strings.Contains(out.String(), "Took back: created the service x") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestRunPlanMayFailAndUndoCommand: a command that may fail (booting out
// a job not loaded) does not stop the plan, and a command's own undo runs
// when a later step fails.
func TestRunPlanMayFailAndUndoCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mark := filepath.Join(dir, "undone")
	p := &installPlan{steps: []installStep{
		{cmd: []string{"false"}, mayFail: true},
		{cmd: []string{"true"}, undo: []string{"touch", mark}},
		{cmd: []string{"false"}},
	}}
	var out bytes.Buffer
	if err := runPlan(context.Background(), &out, p, false); err == nil {
		t.Fatal("the failing last step did not fail the plan")
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the command's undo did not run: %v\n%s", err, out.String())
	}
}
