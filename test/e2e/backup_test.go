//go:build linux

package e2e

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// runFailing runs the binary, expects it to fail, and returns its stderr.
func runFailing(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("outpost %s succeeded; want a failure", strings.Join(args, " "))
	}
	return stderr.String()
}

// TestBackupRestoreUnderLoad backs a running server up from another
// process while a writer creates sessions, restores the archive into a new
// data dir, and starts a server there: the restored database passes its
// integrity check, holds every session created before the backup began,
// and its secrets still open — a worker runs a session whose script checks
// its secret's value, which needs the key the archive carried. The restore
// refuses a data dir in use and one that is not empty.
func TestBackupRestoreUnderLoad(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "bk")
	if code := c.api("POST", "/v1/outposts", c.admin, api.CreateOutpostRequest{Name: "load", Platform: api.PlatformLinux}, nil); code != 201 {
		t.Fatalf("create outpost load: %d", code)
	}
	const secret = "bk-secret-value-3141"
	checkID := createSession(t, c, api.CreateSessionRequest{Outpost: "bk", Title: "check the secret",
		Secrets: map[string]string{"BK_SECRET": secret},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec,
			Args: json.RawMessage(`{"command":"test \"$BK_SECRET\" = '` + secret + `' && echo secret-matches"}`)}}}})

	// The writer: sessions with a secret each, as fast as the server takes them.
	var mu sync.Mutex // guards created and writeErr
	var created []string
	var writeErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body, _ := json.Marshal(api.CreateSessionRequest{Outpost: "load", Title: fmt.Sprint("load ", i),
				Secrets: map[string]string{"LOAD_SECRET": fmt.Sprint("load-", i)},
				Agent:   api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: json.RawMessage(`{"command":"true"}`)}}}})
			req, _ := http.NewRequest("POST", c.url+"/v1/sessions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+c.admin)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			var s api.Session
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&s)
				resp.Body.Close()
				if err == nil && resp.StatusCode != 201 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			mu.Lock()
			if err != nil {
				writeErr = err
				mu.Unlock()
				return
			}
			created = append(created, s.Metadata.SessionID)
			mu.Unlock()
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(created)
	}
	waitfor.Within(t, 30*time.Second, "the writer to create 10 sessions", func() bool { return count() >= 10 })
	mu.Lock()
	before := append([]string(nil), created...)
	mu.Unlock()

	archive := filepath.Join(t.TempDir(), "outpost.tar.gz")
	out := run(t, nil, "server", "backup", archive, "--data-dir", c.dataDir)
	if !strings.Contains(out, "Backed up") || !strings.Contains(out, "holds the secret key") {
		t.Errorf("backup printed %q", out)
	}
	n := count()
	waitfor.Within(t, 30*time.Second, "the writer to go on after the backup", func() bool { return count() >= n+5 })
	close(stop)
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("the writer failed: %v", writeErr)
	}

	// A restore refuses the data dir a server uses, and one not empty.
	if msg := runFailing(t, nil, "server", "restore", archive, "--data-dir", c.dataDir); !strings.Contains(msg, "in use by another outpost process") {
		t.Errorf("restore into the running server's data dir said %q", msg)
	}
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "notes"), []byte("x"), 0o600)
	if msg := runFailing(t, nil, "server", "restore", archive, "--data-dir", full); !strings.Contains(msg, "not empty") || !strings.Contains(msg, "--force") {
		t.Errorf("restore into a dir that is not empty said %q", msg)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	out = run(t, nil, "server", "restore", archive, "--data-dir", restored)
	if !strings.Contains(out, "Restored") || strings.Contains(out, "WARNING") {
		t.Errorf("restore printed %q", out)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(restored, "outpost.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check of the restored database: %q, %v", check, err)
	}
	db.Close()

	// The original server goes; one on the restored dir serves in its place.
	c.server.stop(syscall.SIGTERM, 20*time.Second)
	r := &cluster{t: t, admin: c.admin, dataDir: restored, addr: freeAddr(t)}
	r.url = "http://" + r.addr
	r.startServer()
	var list api.SessionList
	if code := r.api("GET", "/v1/sessions?outpost=load&limit=1", r.admin, nil, &list); code != 200 {
		t.Fatalf("list restored sessions: %d", code)
	}
	if list.Total < len(before) || list.Total >= count() {
		t.Errorf("restored server holds %d load sessions; %d were created before the backup began, %d in all", list.Total, len(before), count())
	}
	for _, id := range before {
		s := r.session(id)
		if len(s.Spec.SecretNames) != 1 || s.Spec.SecretNames[0] != "LOAD_SECRET" {
			t.Errorf("restored session %s: secret names %v", id, s.Spec.SecretNames)
		}
	}
	// The machine token came along too: a worker uses it as it was.
	startWorker(t, r, "bk", token)
	s := r.waitFinal(checkID, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("the secret check ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	if !strings.Contains(transcriptOutput(r, checkID), "secret-matches") {
		t.Errorf("the check's output lacks secret-matches: %q", transcriptOutput(r, checkID))
	}
}

// TestBackupRefusesPostgres: a server on PostgreSQL is backed up with
// pg_dump, and the command says so.
func TestBackupRefusesPostgres(t *testing.T) {
	t.Parallel()
	msg := runFailing(t, []string{"OUTPOST_DATABASE_URL=postgres://outpost@127.0.0.1:1/outpost"}, "server", "backup", filepath.Join(t.TempDir(), "b.tar.gz"), "--data-dir", t.TempDir())
	if !strings.Contains(msg, "pg_dump") {
		t.Errorf("backup of a PostgreSQL server said %q; want a pg_dump hint", msg)
	}
	msg = runFailing(t, nil, "server", "backup", filepath.Join(t.TempDir(), "b.tar.gz"), "--data-dir", t.TempDir())
	if !strings.Contains(msg, "no database") || !strings.Contains(msg, "pg_dump") {
		t.Errorf("backup of an empty data dir said %q", msg)
	}
}
