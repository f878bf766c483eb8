//go:build linux

package egress

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// namespaceHolder starts `sh -c script` in a network namespace of its own
// and returns that namespace's path; the process ends with the test.
func namespaceHolder(t *testing.T, script string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test makes network namespaces")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	args := []string{"--net", "sh", "-c", script + "; echo ready; exec sleep 60"}
	if script == "" { // the test's own namespace
		args = []string{"sh", "-c", "echo ready; exec sleep 60"}
	}
	cmd := exec.Command("unshare", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 64)
	n, err := out.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), "ready") {
		t.Fatalf("the namespace's holder did not start: %q, %v", buf[:n], err)
	}
	return "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
}

// TestJoinNamespace: an existing namespace with lo only gets the TUN
// device and its routes; one with another interface, this process's own
// namespace and a path that is no namespace are refused, unchanged.
func TestJoinNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	path := namespaceHolder(t, "true")
	n, err := JoinNamespace(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := os.ReadFile(strings.TrimSuffix(path, "/ns/net") + "/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(dev), tunName+":") {
		t.Errorf("no %s in the joined namespace:\n%s", tunName, dev)
	}
	route, err := os.ReadFile(strings.TrimSuffix(path, "/ns/net") + "/net/route")
	if err != nil || !strings.Contains(string(route), tunName+"\t00000000") {
		t.Errorf("no default route through %s in the joined namespace: %v\n%s", tunName, err, route)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	other := namespaceHolder(t, "ip link add outpostv0 type veth peer name outpostv1")
	if _, err := JoinNamespace(ctx, other); err == nil || !strings.Contains(err.Error(), "outpostv0") {
		t.Errorf("a namespace with another interface: %v", err)
	}
	otherDev, _ := os.ReadFile(strings.TrimSuffix(other, "/ns/net") + "/net/dev")
	if strings.Contains(string(otherDev), tunName) {
		t.Errorf("the refused namespace got a %s", tunName)
	}
	// A child's namespace, not /proc/self's: the main thread may have been
	// left in a namespace a locked goroutine joined.
	if _, err := JoinNamespace(ctx, namespaceHolder(t, "")); err == nil {
		t.Error("joined this process's own namespace")
	}
	if _, err := JoinNamespace(ctx, "/etc/hostname"); err == nil {
		t.Error("joined a file that is no namespace")
	}
}
