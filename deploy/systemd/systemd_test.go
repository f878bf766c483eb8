package systemd

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/internal/sandbox"
)

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

// units returns the shipped unit files by name.
func units(t *testing.T) map[string][]byte {
	t.Helper()
	names, err := fs.Glob(Files, "*.service")
	if err != nil || len(names) != 3 {
		t.Fatalf("units %q: %v", names, err)
	}
	out := map[string][]byte{}
	for _, n := range names {
		b, err := Files.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

// TestUnitsVerify: systemd-analyze verify accepts every unit, templates as
// instances too, without a warning.
func TestUnitsVerify(t *testing.T) {
	t.Parallel()
	analyze := systemdAnalyze(t)
	exe, err := os.Executable() // an executable that exists, for ExecStart
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var check []string
	for name, b := range units(t) {
		b = bytes.ReplaceAll(b, []byte("ExecStart="+Binary+" "), []byte("ExecStart="+exe+" "))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		check = append(check, name)
		if strings.HasSuffix(name, "@.service") {
			check = append(check, strings.Replace(name, "@.service", "@gpu-h200.service", 1))
		}
	}
	for _, name := range check {
		cmd := exec.Command(analyze, "verify", name)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}

// TestUnitsKillMode: each unit stops the way its program needs, with a
// timeout above the program's own stop.
func TestUnitsKillMode(t *testing.T) {
	t.Parallel()
	want := map[string][2]string{
		"outpost-server.service":       {"mixed", "30s"},
		"outpost-worker@.service":      {"mixed", "90s"}, // grace 30 s + remote stop 5 s + release 15 s + goodbye 5 s
		"outpost-orchestrate@.service": {"process", "120s"},
	}
	for name, b := range units(t) {
		d := directives(t, b)
		if d["KillMode"] != want[name][0] || d["TimeoutStopSec"] != want[name][1] || d["Restart"] != "on-failure" || d["RestartSec"] == "" {
			t.Errorf("%s: KillMode=%s TimeoutStopSec=%s Restart=%s RestartSec=%s; want KillMode=%s TimeoutStopSec=%s Restart=on-failure",
				name, d["KillMode"], d["TimeoutStopSec"], d["Restart"], d["RestartSec"], want[name][0], want[name][1])
		}
	}
}

// directives returns the [Service] directives of a unit (the last value of
// each).
func directives(t *testing.T, unit []byte) map[string]string {
	t.Helper()
	d := map[string]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("not a directive: %q", line)
			}
			d[k] = v
		}
	}
	return d
}

// notSandboxing are [Service] directives that do not change what a
// sandbox or a session's process can do, or act through seccomp only on
// calls bubblewrap does not make (RestrictRealtime, RestrictSUIDSGID,
// LockPersonality).
var notSandboxing = map[string]bool{
	"Type": true, "User": true, "Group": true, "Environment": true, "EnvironmentFile": true, "ExecStart": true,
	"WorkingDirectory": true, "StateDirectory": true, "StateDirectoryMode": true, "CacheDirectory": true,
	"CacheDirectoryMode": true, "UMask": true, "KillMode": true, "TimeoutStopSec": true, "Restart": true,
	"RestartSec": true, "RestrictRealtime": true, "RestrictSUIDSGID": true, "LockPersonality": true,
}

// hardening turns a unit's sandboxing directives into the mounts systemd
// would make, as a shell script run as root in a mount namespace of its
// own; rw are the paths that stay writable (StateDirectory= and the like).
// It fails the test on a directive it does not know, so a new one is
// simulated (or shown harmless) before it ships.
func hardening(t *testing.T, d map[string]string, rw []string) (script string, nnp bool) {
	t.Helper()
	var pre, post []string
	inaccessible := `mkdir -p /run/outpost-test-inaccessible && chmod 000 /run/outpost-test-inaccessible`
	hide := func(paths ...string) {
		for _, p := range paths {
			post = append(post, fmt.Sprintf(`if [ -d %[1]s ]; then mount --bind -o ro /run/outpost-test-inaccessible %[1]s; elif [ -e %[1]s ]; then mount --bind /dev/null %[1]s; fi`, p))
		}
	}
	roBind := func(paths ...string) {
		for _, p := range paths {
			post = append(post, fmt.Sprintf(`if [ -e %[1]s ]; then mount --bind %[1]s %[1]s && mount -o remount,bind,ro %[1]s; fi`, p))
		}
	}
	strict := false
	for k, v := range d {
		switch {
		case notSandboxing[k]:
		case k == "NoNewPrivileges" && v == "yes":
			nnp = true
		case k == "ProtectSystem" && v == "strict":
			strict = true
		case k == "ProtectHome" && v == "yes":
			hide("/home", "/root", "/run/user")
		case k == "PrivateTmp" && v == "yes":
			pre = append(pre, "mount -t tmpfs tmpfs /tmp", "mount -t tmpfs tmpfs /var/tmp")
		case k == "ProtectKernelModules" && v == "yes":
			hide("/usr/lib/modules", "/lib/modules")
		case k == "ProtectControlGroups" && v == "yes":
			roBind("/sys/fs/cgroup")
		case k == "ProtectProc" && v == "invisible":
			// A proc instance of its own, as systemd mounts: remounting
			// /proc would change the host's, which shares its superblock.
			pre = append(pre, "mount -t proc -o hidepid=invisible proc /proc")
		case k == "ProtectKernelTunables" && v == "yes":
			roBind("/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/acpi", "/sys")
		case k == "ProtectKernelLogs" && v == "yes":
			hide("/proc/kmsg", "/dev/kmsg")
		default:
			t.Errorf("%s=%s: simulate it in hardening, or list it in notSandboxing if it cannot affect a bubblewrap sandbox", k, v)
		}
	}
	lines := append([]string{"set -e", "mount --make-rprivate /", inaccessible}, pre...)
	for _, p := range rw {
		lines = append(lines, fmt.Sprintf("mount --bind %[1]s %[1]s", p))
	}
	if strict {
		skip := []string{"/proc", "/sys", "/dev", "/tmp", "/var/tmp"}
		lines = append(lines, fmt.Sprintf(`for mp in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$mp" in %s) continue;; esac
  mount -o remount,bind,ro "$mp"
done`, strings.Join(append(globs(skip), rw...), "|")))
	}
	return strings.Join(append(lines, post...), "\n"), nnp
}

// globs turns directories into shell case patterns for them and what is
// below them.
func globs(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		out = append(out, d, d+"/*")
	}
	return out
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestHardeningKeepsBwrap runs, under the mounts and no_new_privs that the
// worker's and the orchestrator's hardening give a service, the bubblewrap
// sandbox a worker makes for a session (the same layout as the worker's
// bwrap isolation), as an unprivileged user, and runs session work in it:
// write to the workspace, make a git repository, read its own /proc. As
// a control, the same with ProtectKernelTunables (which the units leave
// out) must fail. It needs root (to make the mounts), unshare, setpriv and
// bwrap.
func TestHardeningKeepsBwrap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make the service's mounts")
	}
	var tools []string
	for _, tool := range []string{"unshare", "setpriv", "bwrap", "git"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("needs %s", tool)
		}
		tools = append(tools, p)
	}
	// The unit's writable state directory: outside /tmp, which PrivateTmp
	// replaces.
	base, err := os.MkdirTemp("/var/lib", "outpost-hardening-test-")
	if err != nil {
		t.Skipf("no state directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil { // as systemd makes /var/lib/outpost
		t.Fatal(err)
	}
	ws := filepath.Join(base, "workspace")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	// The simulation must stay in its mount namespace: the host's /proc
	// (its options are its superblock's, shared) must not change.
	procBefore := hostProcMount(t)
	t.Cleanup(func() {
		if after := hostProcMount(t); after != procBefore {
			t.Errorf("the host's /proc changed from %q to %q", procBefore, after)
		}
	})
	const nobody = 65534
	if err := os.Chown(ws, nobody, nobody); err != nil {
		t.Fatal(err)
	}

	l := sandbox.NewLayout("/etc/outpost").System().ProcDev()
	l.Bind(sandbox.Bind{Src: ws, Dest: ws})
	box := append([]string{tools[2]}, sandbox.NamespaceArgs("outpost-test")...)
	box = append(box, l.Args()...)
	box = append(box, "--remount-ro", "/", "--setenv", "HOME", ws, "--chdir", ws, "--", "/bin/sh", "-c",
		`set -e; echo session > note; git init -q repo; git -C repo status --short; grep -q '^Pid:' /proc/self/status; echo sandbox-ok`)
	var quoted []string
	for _, a := range box {
		quoted = append(quoted, shellQuote(a))
	}
	run := func(d map[string]string) (string, error) {
		script, nnp := hardening(t, d, []string{base})
		priv := []string{tools[1], fmt.Sprintf("--reuid=%d", nobody), fmt.Sprintf("--regid=%d", nobody), "--clear-groups"}
		if nnp {
			priv = append(priv, "--no-new-privs")
		}
		script += "\nexec " + strings.Join(priv, " ") + " " + strings.Join(quoted, " ")
		out, err := exec.Command(tools[0], "--mount", "/bin/sh", "-c", script).CombinedOutput()
		return string(out), err
	}
	for _, name := range []string{"outpost-worker@.service", "outpost-orchestrate@.service"} {
		d := directives(t, units(t)[name])
		if d["NoNewPrivileges"] != "yes" || d["ProtectSystem"] != "strict" {
			t.Errorf("%s: hardening %v", name, d)
		}
		out, err := run(d)
		if err != nil || !strings.Contains(out, "sandbox-ok") {
			t.Errorf("%s: a sandbox under the unit's hardening: %v\n%s", name, err, out)
		}
		d["ProtectKernelTunables"] = "yes"
		if out, err := run(d); err == nil || !strings.Contains(out, "proc") {
			t.Errorf("%s with ProtectKernelTunables: want bwrap refused its /proc, got %v\n%s", name, err, out)
		}
	}
}

// hostProcMount is this process's /proc line of /proc/self/mountinfo.
func hostProcMount(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == "/proc" {
			return line
		}
	}
	return ""
}
