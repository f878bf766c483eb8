//go:build linux

package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/demo"
	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// tlsCluster is a cluster whose server speaks TLS with a certificate for
// 127.0.0.1 signed by a CA of its own.
type tlsCluster struct {
	*cluster
	ca                *tlstest.CA
	certFile, keyFile string
	first             tlstest.Pair
}

// startTLSCluster starts `outpost server --tls-cert --tls-key` with public
// URL https://127.0.0.1:PORT. The CLI run through c.env trusts the CA by
// OUTPOST_CA_FILE.
func startTLSCluster(t *testing.T) *tlsCluster {
	t.Helper()
	ca := tlstest.NewCA(t, "outpost e2e CA")
	dir := t.TempDir()
	tc := &tlsCluster{ca: ca, certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"), first: ca.Issue(t)}
	tc.first.Write(t, tc.certFile, tc.keyFile)
	tr, err := tlsconfig.Transport(ca.WriteCA(t, dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, admin: adminToken, dataDir: t.TempDir(), addr: freeAddr(t), httpc: &http.Client{Transport: tr},
		caFile: filepath.Join(dir, "ca.pem")}
	c.url = "https://" + c.addr
	c.extra = []string{"--tls-cert", tc.certFile, "--tls-key", tc.keyFile, "--public-url", c.url}
	c.startServer()
	tc.cluster = c
	return tc
}

// withoutCA is env with no OUTPOST_CA_FILE.
func withoutCA(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OUTPOST_CA_FILE=") {
			out = append(out, kv)
		}
	}
	return out
}

// TestTLSSessionEndToEnd runs a whole session over TLS: the CLI, a worker
// given --ca-file (and no OUTPOST_CA_FILE of its own), and its remote over
// wss://, which gets the CA file from the worker. A worker without the CA
// is refused with a sentence saying what to do, and a renewed certificate
// is served without a restart.
func TestTLSSessionEndToEnd(t *testing.T) {
	t.Parallel()
	c := startTLSCluster(t)
	token := setupOutpost(t, c.cluster, "tls")

	// Without the CA: the worker stops at once and says why.
	bare := start(t, "worker-without-ca", withoutCA(c.env(token)), "worker", "start", "--outpost", "tls", "--dir", t.TempDir(), "--data-dir", t.TempDir())
	select {
	case <-bare.done:
	case <-time.After(30 * time.Second):
		t.Fatal("a worker without the CA is still running after 30s")
	}
	out := bare.out.String()
	if code := bare.cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("the worker without the CA exited %d, want 3:\n%s", code, out)
	}
	for _, want := range []string{"x509: certificate signed by unknown authority", "pass --ca-file or set OUTPOST_CA_FILE", c.url} {
		if !strings.Contains(out, want) {
			t.Errorf("the worker without the CA says %q, which lacks %q", out, want)
		}
	}

	dir := t.TempDir()
	worker := start(t, "worker", withoutCA(c.env(token)), "worker", "start", "--outpost", "tls", "--dir", dir,
		"--data-dir", filepath.Join(t.TempDir(), "worker"), "--ca-file", c.caFile,
		"--isolation", "none") // the session clones a repository outside the workspace
	repo, err := demo.MakeRepo(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	req := demo.Session("tls", repo)
	req.Agent.Steps = append(req.Agent.Steps, execStep("echo ca=$OUTPOST_CA_FILE"))
	id := createSession(t, c.cluster, req)
	s := c.waitFinal(id, 90*time.Second)
	assertFinished(t, s)
	output := transcriptOutput(c.cluster, id)
	if !strings.Contains(output, "ca="+c.caFile) {
		t.Errorf("the remote did not get the worker's --ca-file as OUTPOST_CA_FILE:\n%s", output)
	}
	var connected bool
	for _, ev := range c.events(id) {
		connected = connected || ev.Type == api.EventRemoteConnected
	}
	if !connected {
		t.Error("no remote_connected event")
	}
	if log := c.server.out.String(); !strings.Contains(log, "gateway=wss://"+c.addr) {
		t.Errorf("the server does not announce a wss:// gateway:\n%s", log)
	}

	// Renewal: a new pair signed by the CA is served to new connections,
	// by the same server process.
	second := c.ca.Issue(t)
	second.Write(t, c.certFile, c.keyFile)
	waitfor.Within(t, 20*time.Second, "the renewed certificate to be served", func() bool {
		serial, err := tlstest.PeerSerial(c.addr, c.ca.Pool())
		return err == nil && serial.Cmp(second.Cert.SerialNumber) == 0
	})
	select {
	case <-c.server.done:
		t.Fatal("the server exited during the renewal")
	default:
	}
	// The server's log reaches the test through a pipe: the line may come
	// a moment after the handshake that served the new certificate.
	waitfor.Within(t, 10*time.Second, "the server to log the reload", func() bool {
		return strings.Contains(c.server.out.String(), "TLS certificate reloaded")
	})
	// The worker, whose connections are new ones too, serves another
	// session with the renewed certificate.
	id2 := createSession(t, c.cluster, scriptSession("tls", "after renewal", execStep("echo renewed")))
	assertFinished(t, c.waitFinal(id2, 90*time.Second))
	if err := worker.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("worker exit: %v", err)
	}
}

// TestTLSOrchestrateBwrap: an orchestrator given --ca-file serves a
// session in a bubblewrap sandbox, whose remote reads the CA file bound
// into it read-only (the host's /tmp, where the file is, is not visible
// there).
func TestTLSOrchestrateBwrap(t *testing.T) {
	requireBwrap(t)
	t.Parallel()
	c := startTLSCluster(t)
	token := setupOutpost(t, c.cluster, "tls-bwrap")
	state := t.TempDir()
	args := []string{"orchestrate", "--outpost", "tls-bwrap", "--state-dir", state, "--poll-interval", "2s", "--backend", "bwrap", "--ca-file", c.caFile}
	start(t, "orchestrator", withoutCA(c.env(token)), args...)
	id := createSession(t, c.cluster, scriptSession("tls-bwrap", "sandbox over TLS",
		execStep(`echo "ca=$OUTPOST_CA_FILE"; test -e `+c.caFile+` && echo host-ca-visible || echo host-ca-hidden; grep -c "BEGIN CERTIFICATE" "$OUTPOST_CA_FILE"`)))
	assertFinished(t, c.waitFinal(id, 90*time.Second))
	out := transcriptOutput(c.cluster, id)
	for _, want := range []string{"ca=/outpost/ca.pem", "host-ca-hidden", "1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, out)
		}
	}
}

// TestTLSOrchestrateDocker: the same with a container of the docker
// backend, the CA file mounted read-only.
func TestTLSOrchestrateDocker(t *testing.T) {
	t.Parallel()
	host := podmantest.API(t)
	c := startTLSCluster(t)
	token := setupOutpost(t, c.cluster, "tls-dock")
	state := t.TempDir()
	args := []string{"orchestrate", "--outpost", "tls-dock", "--state-dir", state, "--poll-interval", "2s", "--ca-file", c.caFile,
		"--backend", "docker", "--docker-host", host, "--docker-image", podmantest.Image, "--docker-network", "host"}
	start(t, "orchestrator", withoutCA(c.env(token)), args...)
	id := createSession(t, c.cluster, scriptSession("tls-dock", "container over TLS",
		execStep(`echo "ca=$OUTPOST_CA_FILE"; grep -c "BEGIN CERTIFICATE" "$OUTPOST_CA_FILE"`)))
	assertFinished(t, c.waitFinal(id, 120*time.Second))
	out := transcriptOutput(c.cluster, id)
	for _, want := range []string{"ca=/outpost/ca.pem", "1\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the container's output lacks %q:\n%s", want, out)
		}
	}
	assertNoContainers(t, state, id)
}
