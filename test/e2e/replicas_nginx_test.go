//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/tlsconfig"
	"github.com/outpost-sh/outpost/internal/tlsconfig/tlstest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestReplicasBehindNginx runs three replicas behind nginx configured as
// the docs say: docs/production.md's configuration with the upstream of
// docs/replicas.md. A worker and its remotes reach the replicas only
// through nginx. A session runs; one replica is killed with SIGKILL in the
// middle of the next session's call, which still ends once, and more
// sessions run while it is down (nginx passes over it) and after it is
// started again.
func TestReplicasBehindNginx(t *testing.T) {
	t.Parallel()
	bin := requireNginx(t)
	ca := tlstest.NewCA(t, "outpost replicas nginx test CA")
	certDir := t.TempDir()
	cert, key := filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")
	ca.Issue(t).Write(t, cert, key)
	caFile := ca.WriteCA(t, certDir, "ca.pem")
	tr, err := tlsconfig.Transport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	var nginxDir string
	rs := startReplicaSet(t, replicaOptions{Front: func(rs *replicaSet, addrs []string) *cluster {
		listen := rs.frontAddr
		prod := documentedNginx(t)
		from := strings.Index(prod, "upstream outpost {")
		to := strings.Index(prod[max(from, 0):], "}\n")
		if from < 0 || to < 0 {
			t.Fatal("docs/production.md's nginx configuration has no upstream outpost block")
		}
		upstream := templateNginx(t, nginxBlock(t, "docs/replicas.md"), "docs/replicas.md", [][2]string{
			{"10.0.0.5:7420", addrs[0]}, {"10.0.0.6:7420", addrs[1]}, {"10.0.0.7:7420", addrs[2]},
		})
		conf := prod[:from] + upstream + "\n" + prod[from+to+2:]
		conf = templateNginx(t, conf, "docs/production.md", [][2]string{
			{"listen 443 ssl;", "listen " + listen + " ssl;"},
			{"/etc/ssl/outpost/fullchain.pem", cert},
			{"/etc/ssl/outpost/privkey.pem", key},
		})
		nginxDir = startNginxConf(t, bin, listen, conf)
		return &cluster{t: t, admin: adminToken, url: "https://" + listen, addr: listen, httpc: &http.Client{Transport: tr}, caFile: caFile}
	}})
	c := rs.front
	token := setupOutpost(t, c, "behind-nginx")
	startWorker(t, c, "behind-nginx", token)
	runOne := func(title string) {
		t.Helper()
		id := createSession(t, c, apiScriptSession("behind-nginx", title, execStep("echo "+title)))
		s := c.waitFinal(id, 60*time.Second)
		if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished || !strings.Contains(transcriptText(c.events(id)), title) {
			t.Fatalf("session %q ended %s/%s: %s", title, s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
		}
	}
	runOne("before-the-kill")

	marks := filepath.Join(t.TempDir(), "runs")
	release := filepath.Join(t.TempDir(), "release")
	id := createSession(t, c, apiScriptSession("behind-nginx", "across the kill",
		execStep(fmt.Sprintf("echo ran >> %s; while [ ! -e %s ]; do sleep 0.05; done; echo released", marks, release)),
		execStep("echo second-step")))
	waitfor.Within(t, 30*time.Second, "the call to run", func() bool { _, err := os.Stat(marks); return err == nil })
	rs.kill9(0)
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("the session across the kill ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if runs, _ := os.ReadFile(marks); strings.Count(string(runs), "ran") != 1 {
		t.Errorf("the call across the kill ran %d times, want once", strings.Count(string(runs), "ran"))
	}
	results := map[int64]int{}
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult {
			results[ev.CallSeq]++
		}
	}
	if results[1] != 1 || results[2] != 1 {
		t.Errorf("results per call %v, want one each", results)
	}
	for i := range 3 {
		runOne(fmt.Sprintf("while-r1-is-down-%d", i))
	}
	rs.start(0)
	runOne("after-the-restart")
	access, _ := os.ReadFile(filepath.Join(nginxDir, "access.log"))
	if !strings.Contains(string(access), `"GET /v1/gateway HTTP/1.1" 101`) {
		t.Errorf("nginx's access log shows no upgraded gateway connection")
	}
}
