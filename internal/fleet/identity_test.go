package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestAcceptorIDPersisted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "worker")
	id1, err := LoadAcceptorID(dir, "worker")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(id1, "worker-") || len(id1) < len("worker-x-12345678") {
		t.Errorf("acceptor id %q, want worker-<host>-<random>", id1)
	}
	id2, err := LoadAcceptorID(dir, "worker")
	if err != nil || id2 != id1 {
		t.Fatalf("second load = %q, %v; want %q", id2, err, id1)
	}
	fi, err := os.Stat(filepath.Join(dir, "acceptor-id"))
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("acceptor-id mode %v, want 0600", fi.Mode().Perm())
	}
	if other, _ := LoadAcceptorID(t.TempDir(), "worker"); other == id1 {
		t.Errorf("two data dirs share acceptor id %q", other)
	}
}

// An orchestrator's new id says what it is; an id saved by an older
// version, whatever its first word, is kept so its claims stay its own.
func TestAcceptorIDOfAnotherKind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	id, err := LoadAcceptorID(dir, "orchestrator")
	if err != nil || !strings.HasPrefix(id, "orchestrator-") {
		t.Fatalf("new id %q, %v; want orchestrator-<host>-<random>", id, err)
	}
	if again, err := LoadAcceptorID(dir, "orchestrator"); err != nil || again != id {
		t.Errorf("second load %q, %v; want %q", again, err, id)
	}

	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, acceptorFile), []byte("worker-box-0123abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kept, err := LoadAcceptorID(old, "orchestrator"); err != nil || kept != "worker-box-0123abcd" {
		t.Errorf("saved id = %q, %v; want it kept", kept, err)
	}
}

// TestIdentityLocksItsDir: a second identity on a data dir is refused with
// the dir, the holder's pid and the hint; after Close it may open.
func TestIdentityLocksItsDir(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	o := IdentityOptions{Dir: t.TempDir(), DirName: "worker data dir", Kind: "worker", DirHint: "Pass --data-dir DIR."}
	id, err := OpenIdentity(o)
	if err != nil {
		t.Fatal(err)
	}
	if id.Instance == "" || !strings.HasPrefix(id.AcceptorID, "worker-") {
		t.Errorf("identity %+v, want an instance and a worker id", id)
	}
	_, err = OpenIdentity(o)
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), o.Dir) ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("second open: %v", err)
	}
	id.Close()
	again, err := OpenIdentity(o)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	if again.AcceptorID != id.AcceptorID {
		t.Errorf("acceptor id %q after reopening, want %q kept", again.AcceptorID, id.AcceptorID)
	}
	again.Close()
	shared, err := OpenIdentity(IdentityOptions{Dir: t.TempDir(), Kind: "worker", AcceptorID: "orch-1", Shared: true})
	if err != nil || shared.Instance != "" || shared.AcceptorID != "orch-1" {
		t.Errorf("shared identity %+v, %v: want orch-1 without an instance", shared, err)
	}
	shared.Close()
}

func TestRenewWait(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		deadline time.Time
		want     time.Duration
	}{
		{time.Time{}, unknownDeadlineWait},
		{now.Add(300 * time.Second), 100 * time.Second},
		{now.Add(time.Second), minRenewWait},
		{now.Add(-time.Minute), minRenewWait},
	} {
		if got := renewWait(tc.deadline, now); got != tc.want {
			t.Errorf("renewWait(%v) = %v, want %v", tc.deadline, got, tc.want)
		}
	}
}
