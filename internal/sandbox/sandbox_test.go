//go:build linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// tree makes dirs (ending in /) and files under a new temporary root.
func tree(t *testing.T, root string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("secret "+p+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLayoutMasks: every bind that would show a hidden path is followed by
// a mask over it (a tmpfs for a directory, /dev/null for a file), at the
// bind's destination, for the path as given and through symlinks; a bind
// that shows nothing hidden gets none; the directory masks are made
// read-only at the end, after a bind inside one.
func TestLayoutMasks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tree(t, root, "ws/", "ws/data/acceptor-id", "ws/data/sessions/s1/", "ws/token", "other/", "shared/cfg/login")
	link := filepath.Join(root, "link-to-shared")
	if err := os.Symlink(filepath.Join(root, "shared"), link); err != nil {
		t.Fatal(err)
	}
	ws, data, tok := filepath.Join(root, "ws"), filepath.Join(root, "ws", "data"), filepath.Join(root, "ws", "token")
	hidden := []string{data, tok, filepath.Join(link, "cfg"), filepath.Join(root, "missing")}
	for _, tc := range []struct {
		name  string
		binds []Bind
		want  []string // in order
		never []string
	}{
		{name: "nothing hidden in the bind", binds: []Bind{{Src: filepath.Join(root, "other"), Dest: "/other"}},
			want: []string{"--bind " + root + "/other /other"}, never: []string{"--tmpfs", "/dev/null"}},
		{name: "workspace holding the data dir and a token file",
			binds: []Bind{{Src: ws, Dest: ws}, {Src: filepath.Join(data, "sessions", "s1"), Dest: filepath.Join(data, "sessions", "s1")}},
			want: []string{"--bind " + ws + " " + ws, "--tmpfs " + data, "--ro-bind /dev/null " + tok,
				"--bind " + data + "/sessions/s1 " + data + "/sessions/s1", "--remount-ro " + data}},
		{name: "bind at another destination", binds: []Bind{{Src: ws, Dest: "/work", ReadOnly: true}},
			want: []string{"--ro-bind " + ws + " /work", "--tmpfs /work/data", "--ro-bind /dev/null /work/token", "--remount-ro /work/data"}},
		{name: "hidden through a symlink", binds: []Bind{{Src: filepath.Join(root, "shared"), Dest: "/shared"}},
			want: []string{"--bind " + root + "/shared /shared", "--tmpfs /shared/cfg"}},
		{name: "a bind that is the hidden path", binds: []Bind{{Src: data, Dest: "/data"}},
			want: []string{"--bind " + data + " /data", "--tmpfs /data", "--remount-ro /data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLayout(hidden...)
			for _, b := range tc.binds {
				l.Bind(b)
			}
			got := strings.Join(l.Args(), " ")
			at := 0
			for _, w := range tc.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Fatalf("no %q (in order) in %q", w, got)
				}
				at += i + len(w)
			}
			for _, n := range tc.never {
				if strings.Contains(got, n) {
					t.Errorf("%q in %q", n, got)
				}
			}
			if strings.Contains(got, "missing") {
				t.Errorf("a mask for a missing path: %q", got)
			}
		})
	}
}

// TestSystemLayout binds only the allow-listed system directories, masks
// hidden paths inside them, and shows nothing of /home, /root, /var, /srv
// or /tmp.
func TestSystemLayout(t *testing.T) {
	t.Parallel()
	args := NewLayout("/usr/share", "/nonexistent/state", "/srv").System().Args()
	got := strings.Join(args, " ")
	for _, want := range []string{"--ro-bind /usr /usr", "--ro-bind /etc /etc", "--tmpfs /usr/share", "--remount-ro /usr/share"} {
		if !strings.Contains(got, want) {
			t.Errorf("layout lacks %q: %s", want, got)
		}
	}
	for _, bad := range []string{"/nonexistent", "/srv", "/home", "/root", "/var", "/tmp"} {
		if slices.Contains(args, bad) {
			t.Errorf("layout shows %s: %s", bad, got)
		}
	}
}

func TestUnder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		dirs []string
		want bool
	}{
		{"/usr/bin", []string{"/usr"}, true}, {"/usr", []string{"/usr"}, true}, {"/usrx", []string{"/usr"}, false},
		{"/a/b", []string{"/x", "/a"}, true}, {"/a", []string{"/a/b"}, false}, {"/anything", []string{"/"}, true}, {"/a", nil, false},
	} {
		if got := Under(tc.path, tc.dirs...); got != tc.want {
			t.Errorf("Under(%q, %q) = %v", tc.path, tc.dirs, got)
		}
	}
}

func TestParseBind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		in      string
		want    Bind
		wantErr string
	}{
		{in: dir, want: Bind{Src: dir, Dest: dir}},
		{in: dir + ":/data", want: Bind{Src: dir, Dest: "/data"}},
		{in: "relative:/data", wantErr: "SRC must be an absolute path"},
		{in: dir + ":data", wantErr: "DEST must be an absolute path"},
		{in: dir + ":", wantErr: "want SRC[:DEST]"},
		{in: dir + ":/", wantErr: "DEST cannot be /"},
		{in: dir + "/missing", wantErr: "no such file"},
	} {
		got, err := ParseBind(tc.in, false)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
	if err := CheckBinds([]Bind{{Src: dir, Dest: "/usr/no-such-dir"}}); err == nil || !strings.Contains(err.Error(), "read-only system directory") {
		t.Errorf("bind into /usr: %v", err)
	}
	if _, err := Find("/nonexistent/bwrap"); err == nil || !strings.Contains(err.Error(), "bubblewrap") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing bwrap: %v", err)
	}
}

// TestSandboxHidesForReal runs a real sandbox from a layout, as this
// user and, when the test runs as root, as nobody: a hidden file and
// directory under a bound workspace show nothing, the directory mask is
// read-only, a bind inside it shows through and is writable, the
// arguments (with a secret in --setenv) go through ArgsFile and not the
// command line, and the command sees only the sandbox's processes.
func TestSandboxHidesForReal(t *testing.T) {
	bwrap, err := Find("")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	users := []string{"self"}
	if os.Geteuid() == 0 {
		users = append(users, "nobody")
	}
	for _, who := range users {
		t.Run(who, func(t *testing.T) {
			t.Parallel()
			root, err := os.MkdirTemp("", "outpost-sandbox-test-") // t.TempDir's parent is closed to nobody
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(root) })
			tree(t, root, "ws/data/acceptor-id", "ws/data/sessions/s1/", "ws/token", "ws/repo/README")
			var attr *syscall.SysProcAttr
			if who == "nobody" {
				u, err := user.Lookup("nobody")
				if err != nil {
					t.Skip(err)
				}
				uid, _ := strconv.Atoi(u.Uid)
				gid, _ := strconv.Atoi(u.Gid)
				_ = filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, gid) })
				attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			}
			if err := os.Chmod(root, 0o755); err != nil {
				t.Fatal(err)
			}
			ws := filepath.Join(root, "ws")
			data := filepath.Join(ws, "data")
			state := filepath.Join(data, "sessions", "s1")
			l := NewLayout(data, filepath.Join(ws, "token")).System().ProcDev()
			l.Bind(Bind{Src: ws, Dest: ws}).Bind(Bind{Src: state, Dest: state})
			args := append(NamespaceArgs("probe-box"), l.Args()...)
			if err := Probe(context.Background(), bwrap, args, attr); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--remount-ro", "/", "--chdir", ws)
			args = append(args, EnvArgs([]string{"SECRET=s3cr3t", "PATH=/usr/bin:/bin"})...)
			f, err := ArgsFile(args)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			script := `echo "acceptor=$(cat data/acceptor-id 2>&1 | head -c 40)"
echo "token=$(cat token 2>/dev/null || echo none)"
echo "data=$(ls -A data | tr '\n' ' ')"
touch data/x 2>/dev/null && echo mask=writable || echo mask=ro
touch data/sessions/s1/ok && echo state=writable
echo "readme=$(cat repo/README)"
echo "host=$(hostname) procs=$(ls -d /proc/[0-9]* | wc -l) secret=$SECRET"
tr '\0' ' ' < /proc/1/cmdline; echo`
			cmd := exec.Command(bwrap, "--args", "3", "--", "/bin/sh", "-c", script)
			cmd.Env = []string{}
			cmd.ExtraFiles = []*os.File{f}
			cmd.SysProcAttr = attr
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("sandbox: %v\n%s", err, out)
			}
			got := string(out)
			for _, want := range []string{"token=none", "data=sessions \n", "mask=ro", "state=writable", "readme=secret ws/repo/README",
				"host=probe-box procs=", "secret=s3cr3t"} {
				if !strings.Contains(got, want) {
					t.Errorf("no %q in:\n%s", want, got)
				}
			}
			if strings.Contains(got, "secret ws/data/acceptor-id") || strings.Contains(got, "secret ws/token") {
				t.Errorf("a hidden file shows:\n%s", got)
			}
			if _, err := os.Stat(filepath.Join(state, "ok")); err != nil {
				t.Errorf("the state dir's file is not on the host: %v", err)
			}
			if !strings.Contains(strings.Join(cmd.Args, " "), "--args 3") || strings.Contains(strings.Join(cmd.Args, " "), "s3cr3t") {
				t.Errorf("command line %q", cmd.Args)
			}
		})
	}
}
