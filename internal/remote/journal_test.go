package remote

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestJournalReplayAndCompaction writes calls in every state, tears the
// last line as a crash would, and reopens: the state is rebuilt and the
// file shrinks to what is still needed.
func TestJournalReplayAndCompaction(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	j, err := openJournal(state)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.load(); err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 50; seq++ {
		must(t, j.started(startedRecord{Seq: seq, Tool: api.ToolExec}))
		if seq <= 49 {
			must(t, j.done(api.Frame{Type: api.FrameResult, Seq: seq, OK: true}))
		}
		if seq <= 48 {
			must(t, j.acked(seq))
		}
	}
	j.close()
	path := filepath.Join(state, "journal", "journal.log")
	before, _ := os.Stat(path)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"k":"done","seq":50,"result":{"ty`) // torn by a crash
	f.Close()

	j2, _ := openJournal(state)
	st, err := j2.load()
	if err != nil {
		t.Fatal(err)
	}
	defer j2.close()
	if len(st.Done) != 1 || !st.Done[49].OK || len(st.Interrupted) != 1 || st.Interrupted[0].Seq != 50 || st.LastSeq != 50 {
		t.Fatalf("state after reload: %+v", st)
	}
	if !j2.isAcked(48) || j2.isAcked(49) {
		t.Fatal("acks not remembered")
	}
	after, _ := os.Stat(path)
	if after.Size() >= before.Size() {
		t.Fatalf("journal not compacted: %d bytes before, %d after", before.Size(), after.Size())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestJournalNewIsNotRewritten: a journal with nothing in it (a new
// session's) is opened as it is, not compacted (a rewrite, a rename and
// two fsyncs at every remote's start), and still records and replays.
func TestJournalNewIsNotRewritten(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	path := filepath.Join(state, "journal", "journal.log")
	must(t, os.MkdirAll(filepath.Dir(path), 0o700))
	must(t, os.WriteFile(path, nil, 0o600))
	before, err := os.Stat(path)
	must(t, err)
	j, err := openJournal(state)
	must(t, err)
	if _, err := j.load(); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	must(t, err)
	if !os.SameFile(before, after) {
		t.Error("the empty journal was rewritten (compacted) at load")
	}
	must(t, j.started(startedRecord{Seq: 1, Tool: api.ToolExec}))
	j.close()
	j2, err := openJournal(state)
	must(t, err)
	st, err := j2.load()
	must(t, err)
	defer j2.close()
	if len(st.Interrupted) != 1 || st.Interrupted[0].Seq != 1 {
		t.Fatalf("state after reload: %+v", st)
	}
}

// TestJournalKeepsNoArguments: a call whose arguments hold a secret's
// literal value leaves no trace of it in the journal, which stays on the
// machine's disk while its results wait for their acks.
func TestJournalKeepsNoArguments(t *testing.T) {
	const secret = "s3cr3t-journal-value-9d1"
	g := newTestGateway(t)
	state, work := t.TempDir(), t.TempDir()
	errc, cancel := startServe(t, g, state, work)
	gc := g.accept(t)
	gc.handshake(t, nil, map[string]string{"API_KEY": secret})
	gc.send(t, execCall(1, `test "$API_KEY" = "`+secret+`" && echo "same: `+secret+`"`))
	if res := gc.next(t, api.FrameResult); !res.OK {
		t.Fatalf("result = %+v", res)
	}
	cancel() // before the ack: the journal keeps the call
	<-errc
	b, err := os.ReadFile(filepath.Join(state, "journal", "journal.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"seq":1`) {
		t.Fatalf("the journal does not hold the call:\n%s", b)
	}
	if strings.Contains(string(b), secret) {
		t.Errorf("the journal holds the secret's value:\n%s", b)
	}
}
