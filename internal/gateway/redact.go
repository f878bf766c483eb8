package gateway

import (
	"encoding/json"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/redact"
)

// OutputRedactor redacts a session's secrets from what its remote sends,
// before any of it reaches the transcript, a spill or a watcher. The remote
// redacts its output itself; this is for a remote that does not: an old
// build, or session code that took the remote's connect token and speaks
// for it. A secret split across two output frames of one call's stream is
// still found: each (call, stream) holds back a tail that may begin a
// secret until the next frame, the call's result, or the connection's end.
// It is used by one connection's read loop only.
type OutputRedactor struct {
	set     *redact.Set
	streams map[outputKey]*redact.Stream
}

type outputKey struct {
	seq    int64
	stream string
}

// NewOutputRedactor redacts the secrets of set; a nil set redacts nothing.
func NewOutputRedactor(set *redact.Set) *OutputRedactor {
	return &OutputRedactor{set: set, streams: map[outputKey]*redact.Stream{}}
}

// Write returns f's data with the secrets redacted, less a tail held back.
func (r *OutputRedactor) Write(f api.OutputFrame) []byte {
	if r.set == nil {
		return f.Data
	}
	k := outputKey{f.Seq, f.Stream}
	st := r.streams[k]
	if st == nil {
		st = redact.NewStream(r.set)
		r.streams[k] = st
	}
	return st.Write(f.Data)
}

// Flush hands emit what call seq's streams hold back, redacted.
func (r *OutputRedactor) Flush(seq int64, emit func(api.OutputFrame)) {
	for k, st := range r.streams {
		if k.seq != seq {
			continue
		}
		if tail := st.Flush(); len(tail) > 0 {
			emit(api.OutputFrame{Seq: k.seq, Stream: k.stream, Data: tail})
		}
		delete(r.streams, k)
	}
}

// FlushAll hands emit what every stream holds back: the connection ended.
func (r *OutputRedactor) FlushAll(emit func(api.OutputFrame)) {
	for k := range r.streams {
		r.Flush(k.seq, emit)
	}
}

// Result redacts a result frame's value and error.
func (r *OutputRedactor) Result(f *api.Frame) {
	if r.set == nil {
		return
	}
	if len(f.Value) > 0 {
		f.Value = r.set.JSON(f.Value)
	}
	f.Error = r.set.String(f.Error)
}

// Report redacts the strings of a frame the remote sends besides output
// and results (its hello's description of the machine, how it restored the
// session's repositories and snapshot, the snapshot it took): their errors
// and names reach the transcript and the answers of suspends. The fields
// the server matches rather than shows (type, ids, checksums) are kept as
// they are, so a short secret cannot break them.
func (r *OutputRedactor) Report(f *api.Frame) {
	if r.set == nil {
		return
	}
	raw, err := json.Marshal(f)
	if err != nil {
		return
	}
	red := r.set.JSON(raw)
	if string(red) == string(raw) {
		return
	}
	var g api.Frame
	if err := json.Unmarshal(red, &g); err != nil {
		return
	}
	g.Type, g.SessionID, g.Instance = f.Type, f.SessionID, f.Instance
	if f.Snapshot != nil && g.Snapshot != nil {
		g.Snapshot.SHA256 = f.Snapshot.SHA256
	}
	if f.SnapshotRestored != nil && g.SnapshotRestored != nil {
		g.SnapshotRestored.SHA256 = f.SnapshotRestored.SHA256
	}
	*f = g
}
