package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/outpost-sh/outpost/internal/orchestrator/podmantest"
)

// initDaemon serves the Engine API at upstream (a unix socket path) on a
// socket of its own, as a daemon configured to run an init process in
// every container (dockerd's "init": true) does: a create request that
// leaves HostConfig.Init unset gets one. It returns the socket's path and
// the number of creates it gave an init.
func initDaemon(t *testing.T, upstream string) (string, *atomic.Int32) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "init.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var given atomic.Int32
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
			if r.In.Method != http.MethodPost || !strings.HasSuffix(r.In.URL.Path, "/containers/create") {
				return
			}
			body, err := io.ReadAll(r.In.Body)
			if err != nil {
				return
			}
			var req map[string]any
			if json.Unmarshal(body, &req) == nil {
				hc, _ := req["HostConfig"].(map[string]any)
				if hc == nil {
					hc = map[string]any{}
					req["HostConfig"] = hc
				}
				if hc["Init"] == nil {
					hc["Init"] = true
					given.Add(1)
				}
				body, _ = json.Marshal(req)
			}
			r.Out.Body = io.NopCloser(bytes.NewReader(body))
			r.Out.ContentLength = int64(len(body))
			r.Out.Header.Set("Content-Length", strconv.Itoa(len(body)))
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", upstream)
		}},
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: proxy}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return sock, &given
}

// TestDockerHolderUnderDaemonInit: a daemon that starts every container
// under an init process still serves restricted sessions: the holder asks
// for none, so the pid the daemon reports is the holder's own shell, whose
// namespace the guard may serve.
func TestDockerHolderUnderDaemonInit(t *testing.T) {
	t.Parallel()
	direct := newTestBackend(t, DockerOptions{Outpost: "netunit"})
	needNetworkEnforcement(t, direct)
	sock, given := initDaemon(t, strings.TrimPrefix(direct.Host(), "unix://"))
	b := newTestBackend(t, DockerOptions{Host: "unix://" + sock, Outpost: "netunit"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := b.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.EnforcesNetwork(); err != nil {
		t.Errorf("with a daemon that runs an init in its containers: %v", err)
	}

	// The daemon does run an init where a container leaves it unset.
	name := "outpost-inittest-" + randomID(t)
	created, err := b.cli.ContainerCreate(ctx, &container.Config{Image: testImage, Entrypoint: []string{"/bin/sh", "-c", "exec sleep 60"}},
		&container.HostConfig{NetworkMode: "none", Resources: container.Resources{Ulimits: b.opts.Ulimits}}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.forceRemove(context.WithoutCancel(ctx), created.ID) }()
	if err := b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := b.cli.ContainerInspect(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(info.State.Pid) + "/cmdline")
	if given.Load() == 0 || strings.HasPrefix(string(cmdline), "/bin/sh\x00") {
		t.Fatalf("the simulated daemon ran no init (%d creates given one; pid %d runs %q)", given.Load(), info.State.Pid, cmdline)
	}
}

// TestDockerCheckRemovesStaleProbes: the probe holder an orchestrator left
// when it ended during its check is removed by a later check of its
// outpost's orchestrator; a probe that may still be under way, and another
// outpost's, are left alone.
func TestDockerCheckRemovesStaleProbes(t *testing.T) {
	t.Parallel()
	outpost := "probeunit-" + strings.ToLower(randomID(t))
	crashed := newTestBackend(t, DockerOptions{Outpost: outpost})
	needNetworkEnforcement(t, crashed)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	left := Spec{Name: probePrefix + strings.ToLower(randomID(t))}
	if _, err := crashed.NetworkNamespace(ctx, left); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = crashed.removeHolder(context.WithoutCancel(ctx), left.Name) }()
	present := func() bool {
		return slices.Contains(podmantest.Containers(t, LabelOutpost+"="+outpost), holderName(left.Name))
	}

	young := newTestBackend(t, DockerOptions{Outpost: outpost})
	if _, err := young.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if !present() {
		t.Fatal("a check removed a probe that may still be under way")
	}
	other := newTestBackend(t, DockerOptions{Outpost: outpost + "-other"})
	other.staleProbeAge = 0
	if _, err := other.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if !present() {
		t.Fatal("another outpost's check removed the probe")
	}
	next := newTestBackend(t, DockerOptions{Outpost: outpost})
	next.staleProbeAge = 0
	if _, err := next.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if present() {
		t.Error("the leftover probe holder is still there after its outpost's next check")
	}
	if err := next.EnforcesNetwork(); err != nil {
		t.Errorf("after removing the leftover: %v", err)
	}
}
