//go:build unix

package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testSessionUser creates a Unix user of the test's own and deletes it
// when the test ends; the test must be root. A worker in user isolation
// ends every process of its run-as user, so tests never give it a user
// that anything else on the machine runs as (nobody).
func testSessionUser(t *testing.T) *sessionUser {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a user")
	}
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		t.Skipf("no useradd: %v", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "outpost-t" + hex.EncodeToString(b)
	// useradd fails while another one holds the passwd lock: try again.
	deadline := time.Now().Add(testTimeout)
	for {
		out, err := exec.Command(useradd, "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("useradd %s: %v %s", name, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	u, err := lookupSessionUser(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := u.endProcesses(context.Background()); err != nil {
			t.Errorf("end the test user's processes: %v", err)
		}
		for range 50 {
			out, err := exec.Command("userdel", name).CombinedOutput()
			if err == nil {
				return
			}
			if strings.Contains(string(out), "does not exist") {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("userdel %s failed", name)
	})
	return u
}

// sharedTempDir is a directory every user can reach (t.TempDir's parent
// is closed to other users), removed when the test ends.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "outpost-worker-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyTestBinary copies the test binary into dir, where another user can
// run it (the go tool builds it in a directory only its user reaches).
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "worker.test")
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, src); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}
