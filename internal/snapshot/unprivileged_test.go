//go:build linux || darwin

package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// Restore's trouble with read-only directories shows only without root's
// CAP_DAC_OVERRIDE: a test run as root restores through a copy of the test
// binary run as nobody (helperEnv names what it does).
const helperEnv = "OUTPOST_SNAPSHOT_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "restore" {
		os.Exit(restoreHelper())
	}
	os.Exit(m.Run())
}

// helperResult is what the helper process prints.
type helperResult struct {
	Info api.SnapshotInfo `json:"info"`
	Err  string           `json:"err,omitempty"`
}

// restoreHelper restores the archive at argv[1] into argv[2], wanting the
// JSON api.SnapshotInfo argv[3], and prints a helperResult.
func restoreHelper() int {
	args := os.Args[len(os.Args)-3:]
	var want api.SnapshotInfo
	if err := json.Unmarshal([]byte(args[2]), &want); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer f.Close()
	info, err := Restore(context.Background(), f, args[1], want, Options{})
	res := helperResult{Info: info}
	if err != nil {
		res.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// unprivileged is the user restores run as: nobody when the test runs as
// root, else the test's own user.
type unprivileged struct {
	uid, gid int
	bin      string // a copy of the test binary nobody can run; "" in-process
}

var (
	nobodyOnce sync.Once
	nobodyBin  string
	nobodyErr  error
)

// asUnprivileged returns the user the test's restores run as, skipping the
// test when running as root without a nobody user.
func asUnprivileged(t *testing.T) unprivileged {
	t.Helper()
	if os.Geteuid() != 0 {
		return unprivileged{uid: os.Geteuid(), gid: os.Getegid()}
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("running as root without a nobody user: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	nobodyOnce.Do(func() {
		// The test binary lies in a directory closed to nobody.
		var dir string
		dir, nobodyErr = os.MkdirTemp("", "outpost-snapshot-bin-")
		if nobodyErr != nil {
			return
		}
		nobodyErr = os.Chmod(dir, 0o755)
		if nobodyErr != nil {
			return
		}
		var self string
		if self, nobodyErr = os.Executable(); nobodyErr != nil {
			return
		}
		nobodyBin = filepath.Join(dir, "snapshot.test")
		nobodyErr = copyFile(self, nobodyBin, 0o755)
	})
	if nobodyErr != nil {
		t.Fatalf("copy the test binary for nobody: %v", nobodyErr)
	}
	return unprivileged{uid: uid, gid: gid, bin: nobodyBin}
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// dir makes a directory the user owns, outside t.TempDir (whose parent is
// closed to other users), removed after the test.
func (u unprivileged) dir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "outpost-snapshot-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Read-only directories: make them writable so the owner of the
		// test can remove them whoever it is.
		_ = filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				_ = os.Chmod(p, 0o755)
			}
			return nil
		})
		os.RemoveAll(d)
	})
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	u.own(t, d)
	return d
}

// own gives the tree under path to the user.
func (u unprivileged) own(t *testing.T, path string) {
	t.Helper()
	if u.bin == "" {
		return
	}
	err := filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, u.uid, u.gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// restore runs Restore of archive into dst, wanting want, as the user, and
// returns what it returned (the error as text).
func (u unprivileged) restore(t *testing.T, archive []byte, dst string, want api.SnapshotInfo) (api.SnapshotInfo, string) {
	t.Helper()
	if u.bin == "" {
		info, err := Restore(context.Background(), bytes.NewReader(archive), dst, want, Options{})
		if err != nil {
			return info, err.Error()
		}
		return info, ""
	}
	path := filepath.Join(filepath.Dir(dst), fmt.Sprintf("archive-%d.tar.zst", len(archive)))
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	wantJSON, _ := json.Marshal(want)
	cmd := exec.Command(u.bin, "-test.run=^$", "--", path, dst, string(wantJSON))
	cmd.Env = append(os.Environ(), helperEnv+"=restore")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("restore as uid %d: %v\n%s", u.uid, err, stderr.Bytes())
	}
	var res helperResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("restore as uid %d printed %q: %v", u.uid, out, err)
	}
	return res.Info, res.Err
}
