package worker

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	// swap exchanges two paths (renameat2 RENAME_EXCHANGE) in a loop, as
	// a process a session left behind would, until it is killed or a
	// bound passes; it says "swapping" after the first exchange.
	testHelpers["swap"] = func(args []string) int {
		if len(args) != 2 {
			return 2
		}
		until := time.Now().Add(2 * testTimeout)
		said := false
		for time.Now().Before(until) {
			if err := unix.Renameat2(unix.AT_FDCWD, args[0], unix.AT_FDCWD, args[1], unix.RENAME_EXCHANGE); err != nil {
				fmt.Println("renameat2:", err)
				return 1
			}
			if !said {
				fmt.Println("swapping")
				said = true
			}
		}
		return 0
	}
}

// TestChownTreeRace: a process of the run-as user swaps a directory of
// the workspace with a symbolic link to a root-only directory in a loop
// while the root worker gives the workspace to the user again and again.
// No file of the root-only directory ever becomes the user's.
func TestChownTreeRace(t *testing.T) {
	u := testSessionUser(t)
	t.Parallel()
	base := sharedTempDir(t)
	secret, ws := filepath.Join(base, "secret"), filepath.Join(base, "ws")
	const files = 64
	for _, d := range []string{secret, filepath.Join(ws, "d")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		// The same names on both sides: a walk that lists one and changes
		// the other still finds its files.
		for i := range files {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i)), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(secret, filepath.Join(ws, "l")); err != nil {
		t.Fatal(err)
	}
	iso := &isolation{user: u}
	if err := iso.chownTree(ws); err != nil {
		t.Fatal(err)
	}
	checkRootOnly := func(after string) {
		t.Helper()
		err := filepath.WalkDir(secret, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
				return fmt.Errorf("root's %s is now owned by %d:%d", p, st.Uid, st.Gid)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after %s: %v", after, err)
		}
	}
	checkRootOnly("the first walk")

	cmd := exec.Command(copyTestBinary(t, base), filepath.Join(ws, "d"), filepath.Join(ws, "l"))
	cmd.Env = []string{testHelperEnv + "=swap"}
	cmd.SysProcAttr = u.sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "swapping\n" {
		t.Fatalf("the swapper said %q", line)
	}

	const walks = 400
	deadline := time.Now().Add(testTimeout)
	errs := 0
	for i := 1; i <= walks && time.Now().Before(deadline); i++ {
		if err := iso.chownTree(ws); err != nil {
			errs++ // an entry swapped away mid-walk; the next walk finds it
		}
		checkRootOnly(fmt.Sprintf("walk %d", i))
	}
	if cmd.ProcessState != nil {
		t.Fatal("the swapper stopped before the walks ended")
	}
	t.Logf("%d walks raced the swapper (%d ended in an error), the root-only directory stayed root's", walks, errs)
}

// TestChownTreeLeavesLinksAlone: a hard link to a file outside the tree
// (which protected_hardlinks=0 lets session code make), a symbolic link
// to one and a hidden directory are not given away; the tree's own files
// are.
func TestChownTreeLeavesLinksAlone(t *testing.T) {
	u := testSessionUser(t)
	t.Parallel()
	base := sharedTempDir(t)
	ws, outside, hidden := filepath.Join(base, "ws"), filepath.Join(base, "outside"), filepath.Join(base, "ws", "data")
	for _, d := range []string{filepath.Join(ws, "sub"), hidden} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{outside, filepath.Join(ws, "sub", "own"), filepath.Join(hidden, "acceptor-id")} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(outside, filepath.Join(ws, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "sub", "soft")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ws, filepath.Join(base, "ws-link")); err != nil {
		t.Fatal(err)
	}
	iso := &isolation{user: u, hide: []string{hidden}}
	if err := iso.chownTree(filepath.Join(base, "ws-link")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("chownTree through a symbolic link = %v", err)
	}
	if err := iso.chownTree(ws); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) uint32 {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	for p, want := range map[string]uint32{
		ws: u.uid, filepath.Join(ws, "sub"): u.uid, filepath.Join(ws, "sub", "own"): u.uid, filepath.Join(ws, "sub", "soft"): u.uid,
		outside: 0, hidden: 0, filepath.Join(hidden, "acceptor-id"): 0,
	} {
		if got := owner(p); got != want {
			t.Errorf("%s is owned by %d, want %d", p, got, want)
		}
	}
}
