//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store/postgres/pgtest"
	"github.com/outpost-sh/outpost/internal/store/sealed"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// TestPostgresSessionSurvivesRestart runs the server on PostgreSQL (a real
// server the test starts, fsync on): a script session runs through a real
// worker to completion, the server is killed with SIGKILL and started again
// on a new, empty data dir and the same database, and the session, its
// transcript, the outpost and the worker's token are all still there; a
// second session then runs on the same worker. The servers share the key
// session secrets are sealed with through OUTPOST_SECRET_KEY, as servers
// on one database must.
func TestPostgresSessionSurvivesRestart(t *testing.T) {
	t.Parallel()
	pg := pgtest.StartT(t, pgtest.Options{Fsync: true})
	db := pg.Database(t)
	key, err := sealed.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	c := startClusterEnv(t, []string{"OUTPOST_SECRET_KEY=" + sealed.EncodeKey(key)}, "--database", db)
	token := setupOutpost(t, c, "pg")
	startWorker(t, c, "pg", token)

	id := createSession(t, c, api.CreateSessionRequest{
		Outpost: "pg", Title: "on postgres",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			execStep("echo stored-in-postgres"),
			execStep("echo second step"),
		}},
	})
	s := c.waitFinal(id, 60*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session ended %s/%s: %s", s.Status.Status, s.Status.StatusDetail, s.Status.Reason)
	}
	// The worker releases the claim a moment after the session ended, and
	// the release touches the session's record; the record compared after
	// the restart is the one read once the queue entry is held by nobody.
	waitfor.Within(t, 30*time.Second, "the worker to release the claim", func() bool {
		return c.released(id, c.admin)
	})
	s = c.session(id)
	before := c.events(id)
	if !strings.Contains(transcriptText(before), "stored-in-postgres") {
		t.Fatalf("transcript lacks the step's output: %+v", before)
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, "outpost.db")); err == nil {
		t.Fatal("the server wrote an SQLite database although --database was given")
	}

	// Kill the server and bring it back with nothing of the old data dir:
	// everything it serves must come from PostgreSQL.
	c.server.kill9()
	c.dataDir = t.TempDir()
	c.startServer()

	after := c.session(id)
	if after.Status.Status != api.StatusExit || after.Spec.Title != "on postgres" || !reflect.DeepEqual(after, s) {
		a, _ := json.Marshal(after)
		b, _ := json.Marshal(s)
		t.Fatalf("session after restart differs:\n got  %s\n want %s", a, b)
	}
	if got := c.events(id); !reflect.DeepEqual(got, before) {
		t.Fatalf("transcript after restart differs:\n got  %+v\n want %+v", got, before)
	}
	for i, ev := range before {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the transcript must be dense and ordered", i, ev.Seq)
		}
	}

	// The worker reconnects with its token (kept in PostgreSQL) and runs
	// the next session.
	id2 := createSession(t, c, api.CreateSessionRequest{
		Outpost: "pg", Title: "after restart",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{execStep("echo after-restart")}},
	})
	s2 := c.waitFinal(id2, 60*time.Second)
	if s2.Status.Status != api.StatusExit || s2.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("second session ended %s/%s: %s", s2.Status.Status, s2.Status.StatusDetail, s2.Status.Reason)
	}
	if !strings.Contains(transcriptText(c.events(id2)), "after-restart") {
		t.Fatal("second session's transcript lacks its output")
	}
}

// transcriptText joins the output of a transcript.
func transcriptText(evs []api.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type == api.EventOutput {
			b.WriteString(ev.Text)
		}
	}
	return b.String()
}
