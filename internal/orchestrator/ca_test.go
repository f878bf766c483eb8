//go:build linux

package orchestrator

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// caFile writes a stand-in CA file and returns its path.
func caFile(t *testing.T) (path, content string) {
	t.Helper()
	content = "-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n"
	path = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, content
}

// TestBwrapCAFile: the sandbox hides the host's /tmp and home, so the CA
// file is bound into it read-only, where OUTPOST_CA_FILE points.
func TestBwrapCAFile(t *testing.T) {
	b := newTestBwrap(t)
	ca, content := caFile(t)
	s := bwrapSpec(t, "ses_bwca", "/bin/sh", "-c", `
exec > /workspace/facts 2>&1
echo "ca=$OUTPOST_CA_FILE"
cp "$OUTPOST_CA_FILE" /workspace/ca-copy
echo x >> "$OUTPOST_CA_FILE" 2>/dev/null && echo ca_writable=yes || echo ca_writable=no
test -e "`+ca+`" && echo host_path=visible || echo host_path=hidden
echo END
sleep 300`)
	s.Env = append(s.Env, "OUTPOST_CA_FILE="+ca)
	if _, err := b.Provision(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	defer b.Teardown(context.Background(), s)
	f := facts(waitFile(t, filepath.Join(s.Workspace, "work", "facts"), 20*time.Second))
	for k, want := range map[string]string{"ca": BwrapCAFile, "ca_writable": "no", "host_path": "hidden"} {
		if f[k] != want {
			t.Errorf("%s = %q, want %q", k, f[k], want)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(s.Workspace, "work", "ca-copy")); string(got) != content {
		t.Errorf("the sandbox read %q from the CA file", got)
	}
	if got, _ := os.ReadFile(ca); string(got) != content {
		t.Errorf("the sandbox changed the host's CA file: %q", got)
	}

	// A CA file that does not exist fails the provisioning, saying so.
	bad := bwrapSpec(t, "ses_bwca2", "/bin/true")
	bad.Env = append(bad.Env, "OUTPOST_CA_FILE="+filepath.Join(t.TempDir(), "gone.pem"))
	if _, err := b.Provision(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Errorf("a missing CA file: %v", err)
	}
	_ = b.Teardown(context.Background(), bad)
}

func TestContainerEnvAndMountsCAFile(t *testing.T) {
	ca, _ := caFile(t)
	env := containerEnv([]string{"OUTPOST_SESSION_ID=s", "OUTPOST_CA_FILE=" + ca})
	if got := strings.Join(env, " "); got != "OUTPOST_SESSION_ID=s OUTPOST_CA_FILE="+DockerCAFile+" OUTPOST_STATE_DIR=/outpost/state" {
		t.Fatalf("containerEnv: %s", got)
	}
	mounts, err := containerMounts("/bin/outpost", []string{"OUTPOST_CA_FILE=" + ca})
	if err != nil || len(mounts) != 2 || mounts[1].Target != DockerCAFile || !mounts[1].ReadOnly || mounts[1].Source != ca {
		t.Fatalf("mounts %+v, %v", mounts, err)
	}
	if mounts, _ := containerMounts("/bin/outpost", nil); len(mounts) != 1 {
		t.Fatalf("mounts without a CA file: %+v", mounts)
	}
}

// TestDockerBackendCAFile reads the CA file inside a real container.
func TestDockerBackendCAFile(t *testing.T) {
	t.Parallel()
	b := newTestBackend(t, DockerOptions{StopGrace: time.Second})
	ca, content := caFile(t)
	s := shellSpec(t, `cat "$OUTPOST_CA_FILE" > /tmp/ca; (echo x >> "$OUTPOST_CA_FILE") 2>/dev/null && echo yes > /tmp/writable || echo no > /tmp/writable; exec sleep 300`)
	s.Env = append(s.Env, "OUTPOST_CA_FILE="+ca)
	ctx := context.Background()
	if _, err := b.Provision(ctx, s); err != nil {
		t.Fatal(err)
	}
	defer b.Teardown(ctx, s)
	var got, writable string
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := exec.Command("podman", "exec", s.Name, "sh", "-c", "cat /tmp/writable && cat /tmp/ca").CombinedOutput()
		if err == nil {
			writable, got, _ = strings.Cut(string(out), "\n")
			if got != "" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not read its CA file: %s %v", out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != content || writable != "no" {
		t.Errorf("in the container: CA file %q, writable %q; want the host's content, read-only", got, writable)
	}
}
