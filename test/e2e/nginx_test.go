//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// requireNginx returns the nginx binary, skipping the test when there is
// none (failing it when CI is set: scripts/test-deps.sh installs nginx).
func requireNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	if os.Getenv("CI") != "" {
		t.Fatal("nginx is not installed (CI is set: scripts/test-deps.sh installs it, apt-get install nginx)")
	}
	t.Skip("nginx is not installed; the reverse proxy test needs it (apt-get install nginx, or scripts/test-deps.sh)")
	return ""
}

// documentedNginx is the nginx configuration docs/production.md gives: its
// first nginx block.
func documentedNginx(t *testing.T) string {
	t.Helper()
	return nginxBlock(t, "docs/production.md")
}

// nginxBlock is the first nginx block of a document of the repository.
func nginxBlock(t *testing.T, doc string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + doc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```nginx\n")
	conf, _, closed := strings.Cut(rest, "\n```")
	if !ok || !closed {
		t.Fatalf("%s has no ```nginx block", doc)
	}
	return conf
}

// startNginx runs nginx in the foreground with the configuration
// docs/production.md gives, listening on listen with TLS (cert, key) in
// front of the server at upstream, and returns its directory (access.log is
// there). It stops nginx when the test ends.
func startNginx(t *testing.T, bin, listen, upstream, cert, key string) string {
	t.Helper()
	conf := templateNginx(t, documentedNginx(t), "docs/production.md", [][2]string{
		{"listen 443 ssl;", "listen " + listen + " ssl;"},
		{"server 127.0.0.1:7420;", "server " + upstream + ";"},
		{"/etc/ssl/outpost/fullchain.pem", cert},
		{"/etc/ssl/outpost/privkey.pem", key},
	})
	return startNginxConf(t, bin, listen, conf)
}

// templateNginx replaces in a documented configuration each string that
// must be there exactly once.
func templateNginx(t *testing.T, conf, doc string, replace [][2]string) string {
	t.Helper()
	for _, r := range replace {
		if strings.Count(conf, r[0]) != 1 {
			t.Fatalf("the nginx configuration of %s no longer has %q once; update this test with it", doc, r[0])
		}
		conf = strings.Replace(conf, r[0], r[1], 1)
	}
	return conf
}

// startNginxConf runs nginx in the foreground with conf (an http-level
// include) listening on listen, and returns its directory.
func startNginxConf(t *testing.T, bin, listen, conf string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "outpost.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers reach the test's private directories
	}
	main := fmt.Sprintf(`daemon off;
worker_processes 1;
pid %[1]s/nginx.pid;
%[2]s
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/tmp-body;
    proxy_temp_path %[1]s/tmp-proxy;
    fastcgi_temp_path %[1]s/tmp-fastcgi;
    uwsgi_temp_path %[1]s/tmp-uwsgi;
    scgi_temp_path %[1]s/tmp-scgi;
    include %[1]s/outpost.conf;
}
`, dir, user)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	logs := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return out.String() + string(b)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("--- nginx ---\n%s", logs())
		}
	})
	waitfor.Within(t, 10*time.Second, "nginx to listen on "+listen, func() bool {
		select {
		case <-done:
			t.Fatalf("nginx exited: %s", logs())
		default:
		}
		c, err := net.DialTimeout("tcp", listen, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return dir
}

// TestNginxReverseProxy puts the documented nginx configuration, with TLS,
// in front of a real server: the CLI, a worker and its remote reach the
// server only through nginx (the public URL is nginx's); a session runs to
// its end over the proxied gateway WebSocket; and a queue watch and a
// transcript follow deliver their events through the proxy at once, while
// the stream stays open, which they could not if nginx buffered them.
func TestNginxReverseProxy(t *testing.T) {
	t.Parallel()
	bin := requireNginx(t)
	ca := tlstest.NewCA(t, "outpost nginx test CA")
	certDir := t.TempDir()
	cert, key := filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")
	ca.Issue(t).Write(t, cert, key)
	caFile := ca.WriteCA(t, certDir, "ca.pem")
	tr, err := tlsconfig.Transport(caFile)
	if err != nil {
		t.Fatal(err)
	}

	addrs := freeAddrs(t, 2)
	upstream, listen := addrs[0], addrs[1]
	nginxDir := startNginx(t, bin, listen, upstream, cert, key)
	c := &cluster{t: t, admin: adminToken, dataDir: t.TempDir(), addr: upstream, httpc: &http.Client{Transport: tr}, caFile: caFile}
	c.url = "https://" + listen
	c.extra = []string{"--public-url", c.url}
	c.startServer() // ready when /readyz answers through nginx
	token := setupOutpost(t, c, "proxied")

	// A queue watch through nginx, open before the session exists. A
	// buffering proxy would hold even its headers back.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.url+"/v1/queue?outpost=proxied&watch=true", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.client().Do(req)
	if err != nil {
		t.Fatalf("watch through nginx: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("watch through nginx: %d", resp.StatusCode)
	}
	type seen struct {
		id string
		at time.Time
	}
	events := make(chan seen, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Object api.QueueEntry `json:"object"`
			}
			if json.Unmarshal([]byte(data), &ev) == nil {
				events <- seen{ev.Object.Metadata.SessionID, time.Now()}
			}
		}
		close(events)
	}()

	release := filepath.Join(t.TempDir(), "release")
	wait := fmt.Sprintf(`{"command":"echo first-line-through-nginx; while [ ! -e %s ]; do sleep 0.05; done; echo last-line","timeout_s":60}`, release)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "proxied", Title: "behind nginx",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(wait)}}}})
	created := time.Now()
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the watch stream ended before the session's event")
			}
			if ev.id == id {
				got = true
				if lag := ev.at.Sub(created); lag > 2*time.Second {
					t.Errorf("the watch delivered the new session %s after it was created: buffered", lag)
				}
			}
		case <-deadline:
			t.Fatal("the watch through nginx delivered no event for the new session in 10 s: the proxy buffers it")
		}
	}

	follow := start(t, "follow", c.env(c.admin), "sessions", "logs", id, "-f")
	startWorker(t, c, "proxied", token)
	// The session is still running (waiting for release): the follow
	// shows its first line only if nginx passes the stream on as it comes.
	waitfor.Within(t, 30*time.Second, "the follow through nginx to show the first line", func() bool {
		return strings.Contains(follow.out.String(), "first-line-through-nginx")
	})
	if s := c.session(id); s.Status.Status != api.StatusRunning {
		t.Errorf("session %s while the follow showed its first line, want running", s.Status.Status)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	select {
	case <-follow.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the follow did not end with the session")
	}
	if !strings.Contains(follow.out.String(), "last-line") {
		t.Errorf("the follow missed the last line: %q", follow.out.String())
	}
	access, _ := os.ReadFile(filepath.Join(nginxDir, "access.log"))
	if !strings.Contains(string(access), `"GET /v1/gateway HTTP/1.1" 101`) {
		t.Errorf("nginx's access log shows no upgraded gateway connection:\n%s", access)
	}
}
