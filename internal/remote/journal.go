package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/api"
)

// The journal keeps one small file per call and state under
// StateDir/journal: <seq>.started (the call, written before it runs),
// <seq>.done (its result frame, written when it finishes) and, once the
// control plane has acknowledged the result, an empty <seq>.acked that
// replaces both. Every file is written to a temporary name, fsynced and
// renamed, and the directory is fsynced, so a crash leaves either the old
// state or the new.
type journal struct {
	dir string
}

// startedRecord is the content of a <seq>.started file.
type startedRecord struct {
	Seq       int64           `json:"seq"`
	Tool      string          `json:"tool"`
	Args      json.RawMessage `json:"args,omitempty"`
	StartedAt time.Time       `json:"started_at"`
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

const (
	extStarted = ".started"
	extDone    = ".done"
	extAcked   = ".acked"
	tmpPrefix  = ".tmp-"
)

func openJournal(stateDir string) (*journal, error) {
	dir := filepath.Join(stateDir, "journal")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	return &journal{dir: dir}, nil
}

// load reads the journal, removing leftovers of interrupted writes.
func (j *journal) load() (journalState, error) {
	st := journalState{Done: map[int64]api.Frame{}}
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		return st, fmt.Errorf("load journal: %w", err)
	}
	started := map[int64]bool{}
	acked := map[int64]bool{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			_ = os.Remove(filepath.Join(j.dir, name))
			continue
		}
		ext := filepath.Ext(name)
		seq, err := strconv.ParseInt(strings.TrimSuffix(name, ext), 10, 64)
		if err != nil {
			continue
		}
		st.LastSeq = max(st.LastSeq, seq)
		switch ext {
		case extAcked:
			acked[seq] = true
		case extStarted:
			started[seq] = true
		case extDone:
			var f api.Frame
			if err := j.readJSON(name, &f); err != nil {
				return st, err
			}
			st.Done[seq] = f
		}
	}
	for seq := range acked {
		delete(st.Done, seq)
		delete(started, seq)
		j.removeCall(seq)
	}
	for seq := range started {
		if _, ok := st.Done[seq]; ok {
			continue
		}
		var rec startedRecord
		if err := j.readJSON(strconv.FormatInt(seq, 10)+extStarted, &rec); err != nil {
			return st, err
		}
		st.Interrupted = append(st.Interrupted, rec)
	}
	return st, nil
}

func (j *journal) readJSON(name string, v any) error {
	b, err := os.ReadFile(filepath.Join(j.dir, name))
	if err != nil {
		return fmt.Errorf("load journal: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("load journal: %s: %w", name, err)
	}
	return nil
}

// started records that a call is about to run.
func (j *journal) started(rec startedRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("journal call %d: %w", rec.Seq, err)
	}
	if err := j.write(strconv.FormatInt(rec.Seq, 10)+extStarted, b); err != nil {
		return fmt.Errorf("journal call %d: %w", rec.Seq, err)
	}
	return nil
}

// done records a call's result frame.
func (j *journal) done(f api.Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("journal result %d: %w", f.Seq, err)
	}
	if err := j.write(strconv.FormatInt(f.Seq, 10)+extDone, b); err != nil {
		return fmt.Errorf("journal result %d: %w", f.Seq, err)
	}
	return nil
}

// acked records that the control plane holds a result, and drops the call's
// other files.
func (j *journal) acked(seq int64) error {
	if err := j.write(strconv.FormatInt(seq, 10)+extAcked, nil); err != nil {
		return fmt.Errorf("journal ack %d: %w", seq, err)
	}
	j.removeCall(seq)
	return nil
}

// isAcked reports whether seq's result was acknowledged.
func (j *journal) isAcked(seq int64) bool {
	_, err := os.Stat(filepath.Join(j.dir, strconv.FormatInt(seq, 10)+extAcked))
	return err == nil
}

func (j *journal) removeCall(seq int64) {
	base := filepath.Join(j.dir, strconv.FormatInt(seq, 10))
	for _, ext := range []string{extStarted, extDone} {
		_ = os.Remove(base + ext)
	}
}

// write replaces name with data durably.
func (j *journal) write(name string, data []byte) error {
	f, err := os.CreateTemp(j.dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(j.dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(j.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
