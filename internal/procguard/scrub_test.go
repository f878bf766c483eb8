//go:build linux

package procguard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	envSecret = "env-s3cret-token-0123456789"
	argSecret = "arg-s3cret-token-0123456789"
)

// TestScrub starts itself with a token in its environment and on its
// command line; the child scrubs both and checks that neither its
// /proc/self/environ, nor its /proc/self/cmdline, nor a program it starts
// holds the token any more, while the rest of the environment is intact.
func TestScrub(t *testing.T) {
	if os.Getenv("OUTPOST_TEST_SCRUB") == "1" {
		scrubChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestScrub$", argSecret)
	cmd.Env = append(os.Environ(), "OUTPOST_TEST_SCRUB=1", "OUTPOST_TOKEN="+envSecret, "OUTPOST_TEST_KEEP=keep-me")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "scrubbed") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func scrubChild() {
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(1)
	}
	environ, _ := os.ReadFile("/proc/self/environ")
	cmdline, _ := os.ReadFile("/proc/self/cmdline")
	if !bytes.Contains(environ, []byte(envSecret)) || !bytes.Contains(cmdline, []byte(argSecret)) {
		fail("the secrets are not where the test put them")
	}
	arg := strings.Clone(argSecret)
	ScrubEnv("OUTPOST_TOKEN")
	ScrubArg(arg)
	environ, _ = os.ReadFile("/proc/self/environ")
	cmdline, _ = os.ReadFile("/proc/self/cmdline")
	switch {
	case bytes.Contains(environ, []byte(envSecret)):
		fail("/proc/self/environ still holds the token")
	case !bytes.Contains(environ, []byte("OUTPOST_TEST_KEEP=keep-me")):
		fail("scrubbing damaged the rest of the environment: %q", environ)
	case bytes.Contains(cmdline, []byte(argSecret)):
		fail("/proc/self/cmdline still holds the token")
	case !bytes.Contains(cmdline, []byte("-test.run=^TestScrub$")):
		fail("scrubbing damaged the rest of the command line: %q", cmdline)
	case os.Getenv("OUTPOST_TOKEN") != "":
		fail("os.Getenv still finds the token")
	case arg != argSecret:
		fail("the caller's copy of the value changed")
	}
	child, err := exec.Command("sh", "-c", "cat /proc/self/environ").Output()
	if err != nil || bytes.Contains(child, []byte(envSecret)) || !bytes.Contains(child, []byte("keep-me")) {
		fail("a child's environment: %v %q", err, child)
	}
	fmt.Println("scrubbed")
}

// TestNotDumpableHidesEnviron runs a process that holds a secret in its
// environment and a probe, both as one unprivileged user: the probe reads
// the environment of a plain process of that user, but not of one marked
// NotDumpable. Run as root, the test uses the user nobody for both.
func TestNotDumpableHidesEnviron(t *testing.T) {
	switch {
	case os.Getenv("OUTPOST_TEST_TARGET") != "":
		targetChild()
		return
	case os.Getenv("OUTPOST_TEST_PROBE") != "":
		probeChild()
		return
	}
	exe, cred := unprivileged(t)
	for _, tc := range []struct {
		mode, want string
	}{
		{"plain", "readable"},
		{"protect", "denied"},
	} {
		target := exec.Command(exe, "-test.run=^TestNotDumpableHidesEnviron$")
		target.Env = []string{"OUTPOST_TEST_TARGET=" + tc.mode, "OUTPOST_TEST_SECRET=connect-token-xyz"}
		target.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		stdin, _ := target.StdinPipe()
		stdout, _ := target.StdoutPipe()
		if err := target.Start(); err != nil {
			t.Fatalf("start target: %v", err)
		}
		ready := make(chan string, 1)
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			ready <- line
			_, _ = io.Copy(io.Discard, stdout)
		}()
		select {
		case line := <-ready:
			if strings.TrimSpace(line) != "ready" {
				t.Fatalf("target %s: %q", tc.mode, line)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("target %s never got ready", tc.mode)
		}
		probe := exec.Command(exe, "-test.run=^TestNotDumpableHidesEnviron$")
		probe.Env = []string{"OUTPOST_TEST_PROBE=" + strconv.Itoa(target.Process.Pid)}
		probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := probe.CombinedOutput()
		stdin.Close()
		_ = target.Wait()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("probe of a %s process: %v %q, want %q", tc.mode, err, out, tc.want)
		}
	}
}

// unprivileged returns a copy of the test binary that the user of cred
// can run, and cred: nil (this user) when not root, else nobody.
func unprivileged(t *testing.T) (string, *syscall.Credential) {
	t.Helper()
	if os.Geteuid() != 0 {
		return os.Args[0], nil
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Skipf("cannot make a directory the user nobody can enter: %v", err)
		}
	}
	exe := filepath.Join(dir, "procguard.test")
	b, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(exe, b, 0o755)
	}
	if err != nil {
		t.Skipf("cannot copy the test binary for the user nobody: %v", err)
	}
	cred := &syscall.Credential{Uid: 65534, Gid: 65534}
	probe := exec.Command(exe, "-test.run=^$")
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("cannot run the test binary as the user nobody (uid 65534): %v\n%s", err, out)
	}
	return exe, cred
}

func targetChild() {
	if os.Getenv("OUTPOST_TEST_TARGET") == "protect" {
		if err := NotDumpable(); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// probeChild reads the target's environment. A target that is not
// dumpable answers EACCES, or, with /proc mounted hidepid=invisible, is
// not there at all; kill(pid, 0) tells that it is alive all the same.
func probeChild() {
	pid, _ := strconv.Atoi(os.Getenv("OUTPOST_TEST_PROBE"))
	if err := syscall.Kill(pid, 0); err != nil {
		fmt.Println("target not alive:", err)
		os.Exit(0)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	switch {
	case err == nil && bytes.Contains(b, []byte("connect-token-xyz")):
		fmt.Println("readable")
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist):
		fmt.Println("denied")
	default:
		fmt.Printf("unexpected: %v %q\n", err, b)
	}
	os.Exit(0)
}
