package remote

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// The journal is one append-only file, StateDir/journal/journal.log, of
// JSON lines: a "started" record before a call runs, a "done" record with
// its whole result frame when it finishes, and an "acked" record once the
// control plane holds the result. Loading replays the lines (a torn last
// line from a crash is ignored) and rewrites the file with only what is
// still needed, so it stays small.
//
// Records are written, not synced: a crash of the remote process loses
// nothing written (the kernel has it), which is what reconnects and
// restarts need. A crash of the whole machine can lose the last records;
// a call whose result was lost that way is reported as interrupted, like
// a call running at the moment of the crash. Syncing every result cost a
// third of a tool call's round trip (docs/benchmarks.md).
type journal struct {
	path string

	mu   sync.Mutex // guards f and acks
	f    *os.File
	acks map[int64]bool
}

// startedRecord is a call about to run. Its arguments are not kept: a
// restarted remote needs only the seq and tool of a call it found
// interrupted, and arguments hold what a session types, secret values
// included, which would stay on the machine's disk.
type startedRecord struct {
	Seq       int64     `json:"seq"`
	Tool      string    `json:"tool"`
	StartedAt time.Time `json:"started_at"`
}

// journalLine is one line of the journal.
type journalLine struct {
	Kind    string         `json:"k"` // "started", "done" or "acked"
	Seq     int64          `json:"seq"`
	Started *startedRecord `json:"started,omitempty"`
	Result  *api.Frame     `json:"result,omitempty"`
}

// journalState is what a journal holds when it is opened.
type journalState struct {
	// Done are results not yet acknowledged, by seq.
	Done map[int64]api.Frame
	// Interrupted are calls that started but never finished: the process
	// that ran them died.
	Interrupted []startedRecord
	// LastSeq is the highest seq in the journal.
	LastSeq int64
}

func openJournal(stateDir string) (*journal, error) {
	dir := filepath.Join(stateDir, "journal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	return &journal{path: filepath.Join(dir, "journal.log"), acks: map[int64]bool{}}, nil
}

// load replays the journal and compacts it; it must be called once, before
// anything is recorded.
func (j *journal) load() (journalState, error) {
	st := journalState{Done: map[int64]api.Frame{}}
	started := map[int64]startedRecord{}
	raw, err := os.ReadFile(j.path)
	if err != nil && !os.IsNotExist(err) {
		return st, fmt.Errorf("load journal: %w", err)
	}
	if len(raw) == 0 {
		// A new session (or one that recorded nothing): nothing to
		// compact, so no rewrite and none of its two fsyncs, which were a
		// millisecond of every dispatch. The appends are not synced
		// either.
		if j.f, err = os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return st, fmt.Errorf("open journal: %w", err)
		}
		return st, nil
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var l journalLine
		if len(line) == 0 || json.Unmarshal(line, &l) != nil {
			continue // a torn write at a crash
		}
		st.LastSeq = max(st.LastSeq, l.Seq)
		switch l.Kind {
		case "started":
			if l.Started != nil {
				started[l.Seq] = *l.Started
			}
		case "done":
			if l.Result != nil {
				st.Done[l.Seq] = *l.Result
			}
		case "acked":
			j.acks[l.Seq] = true
		}
	}
	for seq := range j.acks {
		delete(st.Done, seq)
		delete(started, seq)
	}
	for seq, rec := range started {
		if _, ok := st.Done[seq]; !ok {
			st.Interrupted = append(st.Interrupted, rec)
		}
	}
	if err := j.compact(st, started); err != nil {
		return st, err
	}
	return st, nil
}

// compact rewrites the journal with only live records and opens it for
// appending.
func (j *journal) compact(st journalState, started map[int64]startedRecord) error {
	tmp := j.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("compact journal: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for seq := range j.acks {
		_ = enc.Encode(journalLine{Kind: "acked", Seq: seq})
	}
	for seq, rec := range started {
		_ = enc.Encode(journalLine{Kind: "started", Seq: seq, Started: &rec})
	}
	for seq, fr := range st.Done {
		_ = enc.Encode(journalLine{Kind: "done", Seq: seq, Result: &fr})
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(j.path))
	}
	if err != nil {
		return fmt.Errorf("compact journal: %w", err)
	}
	j.f, err = os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	return nil
}

// append writes one line.
func (j *journal) append(l journalLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return fmt.Errorf("journal is not open")
	}
	_, err = j.f.Write(b)
	return err
}

// started records that a call is about to run.
func (j *journal) started(rec startedRecord) error {
	if err := j.append(journalLine{Kind: "started", Seq: rec.Seq, Started: &rec}); err != nil {
		return fmt.Errorf("journal call %d: %w", rec.Seq, err)
	}
	return nil
}

// done records a call's result frame.
func (j *journal) done(f api.Frame) error {
	if err := j.append(journalLine{Kind: "done", Seq: f.Seq, Result: &f}); err != nil {
		return fmt.Errorf("journal result %d: %w", f.Seq, err)
	}
	return nil
}

// acked records that the control plane holds a result.
func (j *journal) acked(seq int64) error {
	if err := j.append(journalLine{Kind: "acked", Seq: seq}); err != nil {
		return fmt.Errorf("journal ack %d: %w", seq, err)
	}
	j.mu.Lock()
	j.acks[seq] = true
	j.mu.Unlock()
	return nil
}

// isAcked reports whether seq's result was acknowledged.
func (j *journal) isAcked(seq int64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.acks[seq]
}

// close closes the journal file.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !os.IsPermission(err) {
		return err
	}
	return nil
}
