//go:build linux

package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestIdentityFor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	id, err := IdentityFor(12345, dir, "/home/x")
	if err != nil || len(id.Args) != 0 || len(id.Binds) != 0 || id.User != "" {
		t.Fatalf("a non-root caller's identity = %+v, %v; want the caller's own", id, err)
	}
	id, err = IdentityFor(0, dir, "/home/x")
	if err != nil {
		t.Fatal(err)
	}
	if want := "--uid 1000 --gid 1000"; strings.Join(id.Args, " ") != want {
		t.Errorf("args = %q, want %q", id.Args, want)
	}
	passwd, err := os.ReadFile(filepath.Join(dir, "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(passwd)), "\n")
	if got, want := lines[len(lines)-1], "outpost:x:1000:1000:Outpost session:/home/x:/bin/sh"; got != want {
		t.Errorf("passwd's entry = %q, want %q", got, want)
	}
	for _, l := range lines[:len(lines)-1] {
		if f := strings.Split(l, ":"); len(f) > 2 && (f[0] == SessionUser || f[2] == "1000") {
			t.Errorf("passwd keeps the host's entry %q for the sandbox's uid", l)
		}
	}
	if host, err := os.ReadFile("/etc/passwd"); err == nil && strings.HasPrefix(string(host), "root:") && !strings.HasPrefix(string(passwd), "root:") {
		t.Errorf("passwd lost the host's root entry: %q", passwd)
	}
	group, err := os.ReadFile(filepath.Join(dir, "group"))
	if err != nil || !strings.HasSuffix(string(group), "outpost:x:1000:\n") {
		t.Errorf("group = %q, %v", group, err)
	}
}

// TestIdentityForReal: a sandbox root starts runs its command as the
// session user, which owns what root owns on the host (the workspace),
// and what it writes stays root's on the host.
func TestIdentityForReal(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("the session user applies to sandboxes root starts")
	}
	bwrap, err := Find("")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ws, etc := t.TempDir(), t.TempDir()
	id, err := IdentityFor(0, etc, ws)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLayout().System().ProcDev().Bind(Bind{Src: ws, Dest: ws})
	for _, b := range id.Binds {
		l.Bind(b)
	}
	args := append(append(NamespaceArgs("id-box"), id.Args...), l.Args()...)
	probe := append(append(NamespaceArgs("id-box"), ProbeIdentityArgs(0)...), NewLayout().System().Args()...)
	if err := Probe(context.Background(), bwrap, probe, nil); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--chdir", ws, "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--",
		"/bin/sh", "-c", `id -u; id -un; id -g; stat -c %u .; touch made`)
	out, err := exec.CommandContext(context.Background(), bwrap, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("bwrap: %v: %s", err, out)
	}
	uid := strconv.Itoa(SessionUID)
	if got, want := string(out), uid+"\n"+SessionUser+"\n"+strconv.Itoa(SessionGID)+"\n"+uid+"\n"; got != want {
		t.Errorf("in the sandbox: %q, want %q", got, want)
	}
	fi, err := os.Stat(filepath.Join(ws, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
		t.Errorf("a file the session wrote is owned by %+v on the host, want root", fi.Sys())
	}
}
