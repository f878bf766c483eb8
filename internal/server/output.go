package server

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/blob"
)

// Output batching: chunks of a call's output are merged into transcript
// events of up to outputEventBytes, written at most every flush tick or
// when outputFlushBytes are waiting, so the store sees few transactions.
const (
	outputEventBytes = 64 << 10
	outputFlushBytes = 256 << 10
)

// Output past a call's transcript cap is spilled into the blob store
// (s.outputBlobs) as <session>/<seq>.log: streamed while the call runs,
// stored when it ends (or when its connection does), and served by every
// replica (GET /v1/sessions/{session}/output/{seq}, spill.go). A call whose
// remote reconnected while it ran spills the rest into a further part,
// <seq>.log.1, .2, …, read after the first.
//
// What the server keeps is bounded, so that one session cannot fill its
// disk: a call keeps at most Options.MaxCallOutputBytes (transcript and
// spill together), a session at most Options.MaxSessionOutputBytes of
// spilled output over all its calls. Output past either is dropped, and
// the call's last output event says how much (DroppedBytes). The spilled
// output goes with the session's artifacts (retention.go).

// Default bounds of the output the server keeps.
const (
	// DefaultMaxCallOutputBytes bounds the output of one call.
	DefaultMaxCallOutputBytes = 100 << 20
	// DefaultMaxSessionOutputBytes bounds the spilled output of one
	// session.
	DefaultMaxSessionOutputBytes = 1 << 30
)

// unboundedSpill is the blob limit of a spilled part when calls have no
// bound: in effect none.
const unboundedSpill = 1 << 40

// The caps that drop output, as the transcript's note names them.
const (
	capCall    = "call"
	capSession = "session"
)

// spillKey is the blob key of part n of the spilled output of call seq.
func spillKey(sessionID string, seq int64, part int) string {
	if part == 0 {
		return fmt.Sprintf("%s/%d.log", sessionID, seq)
	}
	return fmt.Sprintf("%s/%d.log.%d", sessionID, seq, part)
}

// sessionOutput turns a session's output frames into transcript events.
type sessionOutput struct {
	s         *Server
	sessionID string

	mu      sync.Mutex // guards the following
	calls   map[int64]*callOutput
	pending []api.Event
	bytes   int
	// spilled is the session's spilled output in the blob store, its
	// parts being written included; known once spillKnown.
	spilled    int64
	spillKnown bool
}

// callOutput is the output accounting of one call.
type callOutput struct {
	stored  int64             // bytes on the transcript
	spilled int64             // bytes this server spilled, over its parts
	dropped int64             // bytes past a cap, kept nowhere
	cause   string            // the cap that dropped them: capCall or capSession
	carry   map[string][]byte // an incomplete UTF-8 sequence per stream
	spill   *blob.Writer      // the part being spilled, or nil
	// Known once listed (spillRoomLocked), until the part being spilled
	// is stored: the bytes of the parts another connection or server
	// spilled, and the number of the next part.
	listed  bool
	earlier int64
	part    int
}

// outputFor returns the session's output state, creating it.
func (s *Server) outputFor(sessionID string) *sessionOutput {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outputs == nil {
		s.outputs = map[string]*sessionOutput{}
	}
	o := s.outputs[sessionID]
	if o == nil {
		o = &sessionOutput{s: s, sessionID: sessionID, calls: map[int64]*callOutput{}}
		s.outputs[sessionID] = o
	}
	return o
}

// dropOutput forgets a finished session's output state.
func (s *Server) dropOutput(sessionID string) {
	s.mu.Lock()
	o := s.outputs[sessionID]
	delete(s.outputs, sessionID)
	s.mu.Unlock()
	if o != nil {
		o.mu.Lock()
		for seq := range o.calls {
			o.closeCallLocked(seq)
		}
		o.mu.Unlock()
	}
}

// validText splits b into valid UTF-8 text and an incomplete trailing
// sequence to carry into the next chunk.
func validText(b []byte) (string, []byte) {
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	text := b[:cut]
	if utf8.Valid(text) {
		return string(text), b[cut:]
	}
	return strings.ToValidUTF8(string(text), "\uFFFD"), b[cut:]
}

// add takes one output frame.
func (o *sessionOutput) add(ctx context.Context, f api.OutputFrame) {
	o.mu.Lock()
	c := o.calls[f.Seq]
	if c == nil {
		c = &callOutput{carry: map[string][]byte{}}
		o.calls[f.Seq] = c
	}
	data := f.Data
	if carry := c.carry[f.Stream]; len(carry) > 0 {
		data = append(carry, data...)
	}
	text, rest := validText(data)
	c.carry[f.Stream] = append([]byte(nil), rest...)
	var live []api.Event
	if room := o.s.opts.OutputCapBytes - c.stored; room > 0 {
		keep := cutText(text, room)
		o.appendLocked(f.Seq, f.Stream, keep)
		c.stored += int64(len(keep))
		text = text[len(keep):]
	}
	if text != "" && c.dropped > 0 {
		// Once a cap dropped output, the rest goes too: what is kept
		// stays one piece.
		c.dropped += int64(len(text))
		text = ""
	}
	if text != "" {
		room, cause, err := o.spillRoomLocked(ctx, f.Seq, c)
		if err != nil {
			// Followers still see it; the store has none of it.
			o.s.log.Warn("spill output", "session", o.sessionID, "seq", f.Seq, "err", err)
			live = append(live, api.Event{SessionID: o.sessionID, Type: api.EventOutput, CallSeq: f.Seq, Stream: f.Stream, Text: text, Spilled: true})
			text = ""
		} else if keep := cutText(text, room); len(keep) < len(text) {
			c.dropped += int64(len(text) - len(keep))
			c.cause = cause
			text = keep
		}
	}
	if text != "" {
		if err := o.spillLocked(ctx, f.Seq, c, text); err != nil {
			o.s.log.Warn("spill output", "session", o.sessionID, "seq", f.Seq, "err", err)
		}
		live = append(live, api.Event{SessionID: o.sessionID, Type: api.EventOutput, CallSeq: f.Seq, Stream: f.Stream, Text: text, Spilled: true})
	}
	full := o.bytes >= outputFlushBytes
	o.mu.Unlock()
	if full {
		o.flush(ctx)
	}
	if len(live) > 0 {
		o.s.topics.publish(o.sessionID, live...)
	}
}

// appendLocked merges text into the last pending event of the same call
// and stream, or starts a new one.
func (o *sessionOutput) appendLocked(seq int64, stream, text string) {
	if text == "" {
		return
	}
	if n := len(o.pending); n > 0 {
		last := &o.pending[n-1]
		if last.CallSeq == seq && last.Stream == stream && len(last.Text)+len(text) <= outputEventBytes {
			last.Text += text
			o.bytes += len(text)
			return
		}
	}
	o.pending = append(o.pending, api.Event{Type: api.EventOutput, Time: o.s.now().UnixMilli(), CallSeq: seq, Stream: stream, Text: text})
	o.bytes += len(text)
}

// cutText is the longest prefix of text of at most n bytes that does not
// split a rune.
func cutText(text string, n int64) string {
	if int64(len(text)) <= n {
		return text
	}
	if n <= 0 {
		return ""
	}
	keep := text[:n]
	for len(keep) > 0 && !utf8.RuneStart(text[len(keep)]) {
		keep = keep[:len(keep)-1]
	}
	return keep
}

// spillRoomLocked is how many more bytes of call seq's output may be
// spilled, and the cap that bounds them: the call's (its transcript part
// and what earlier connections spilled count) or the session's. The first
// call of a session, and of a call, lists what the blob store holds, so
// the bounds hold across reconnects, restarts and replicas.
func (o *sessionOutput) spillRoomLocked(ctx context.Context, seq int64, c *callOutput) (int64, string, error) {
	if !o.spillKnown {
		infos, err := o.s.outputBlobs.List(ctx, o.sessionID+"/")
		if err != nil {
			return 0, "", fmt.Errorf("list spilled output of %s: %w", o.sessionID, err)
		}
		for _, in := range infos {
			o.spilled += in.Size
		}
		o.spillKnown = true
	}
	if !c.listed {
		// A part already stored is an earlier connection's (or this
		// server's, before a reconnect): go on in the next.
		parts, err := o.s.outputBlobs.List(ctx, spillKey(o.sessionID, seq, 0))
		if err != nil {
			return 0, "", fmt.Errorf("list spilled output of %s call %d: %w", o.sessionID, seq, err)
		}
		var stored int64
		c.part = 0
		for _, p := range parts {
			if n, ok := spillPart(p.Key, o.sessionID, seq); ok {
				stored += p.Size
				c.part = max(c.part, n+1)
			}
		}
		c.earlier = max(stored-c.spilled, 0)
		c.listed = true
	}
	room, cause := int64(unboundedSpill), ""
	if m := o.s.opts.MaxCallOutputBytes; m > 0 {
		room, cause = m-c.stored-c.earlier-c.spilled, capCall
	}
	if m := o.s.opts.MaxSessionOutputBytes; m > 0 && m-o.spilled < room {
		room, cause = m-o.spilled, capSession
	}
	return max(room, 0), cause, nil
}

// spillLocked writes text to the part of call seq being spilled, opening
// it first; spillRoomLocked has listed the call's parts.
func (o *sessionOutput) spillLocked(ctx context.Context, seq int64, c *callOutput, text string) error {
	if c.spill == nil {
		limit := int64(unboundedSpill)
		if m := o.s.opts.MaxCallOutputBytes; m > 0 {
			limit = m
		}
		c.spill = blob.NewWriter(context.WithoutCancel(ctx), o.s.outputBlobs, spillKey(o.sessionID, seq, c.part), limit)
	}
	c.spilled += int64(len(text))
	o.spilled += int64(len(text))
	_, err := io.WriteString(c.spill, text)
	return err
}

// storeSpillLocked stores the part of call seq's output being spilled.
func (o *sessionOutput) storeSpillLocked(c *callOutput, seq int64) {
	if c.spill == nil {
		return
	}
	if _, _, err := c.spill.Commit(); err != nil {
		o.s.log.Warn("store spilled output", "session", o.sessionID, "seq", seq, "err", err)
	}
	c.spill = nil
	c.listed = false // a further part follows the one just stored
}

// storeSpills stores what every call of the session spilled so far: its
// connection ended.
func (o *sessionOutput) storeSpills() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for seq, c := range o.calls {
		o.storeSpillLocked(c, seq)
	}
}

// finish flushes a call's output before its result is recorded, and notes
// on the transcript where output past the cap went.
func (o *sessionOutput) finish(ctx context.Context, seq int64) {
	o.mu.Lock()
	if c := o.calls[seq]; c != nil {
		for stream, carry := range c.carry {
			if len(carry) > 0 {
				o.appendLocked(seq, stream, strings.ToValidUTF8(string(carry), "\uFFFD"))
			}
		}
		if c.spilled > 0 {
			o.pending = append(o.pending, api.Event{Type: api.EventOutput, Time: o.s.now().UnixMilli(), CallSeq: seq, Spilled: true,
				Text: fmt.Sprintf("[%d more bytes of output are kept on the server: GET /v1/sessions/%s/output/%d]", c.spilled, o.sessionID, seq)})
		}
		if c.dropped > 0 {
			o.pending = append(o.pending, api.Event{Type: api.EventOutput, Time: o.s.now().UnixMilli(), CallSeq: seq, Spilled: true,
				DroppedBytes: c.dropped, Text: o.droppedNote(c)})
		}
		o.closeCallLocked(seq)
	}
	o.mu.Unlock()
	o.flush(ctx)
}

// droppedNote is the transcript's note on the output of c that a cap
// dropped.
func (o *sessionOutput) droppedNote(c *callOutput) string {
	if c.cause == capSession {
		return fmt.Sprintf("[output truncated: %d more bytes were dropped; this session's output past the transcript's cap reached %d bytes, the most the server keeps for one session (outpost server --max-session-output-bytes)]",
			c.dropped, o.s.opts.MaxSessionOutputBytes)
	}
	return fmt.Sprintf("[output truncated: %d more bytes were dropped; the server keeps at most %d bytes of one call's output (outpost server --max-call-output-bytes)]",
		c.dropped, o.s.opts.MaxCallOutputBytes)
}

func (o *sessionOutput) closeCallLocked(seq int64) {
	if c := o.calls[seq]; c != nil {
		o.storeSpillLocked(c, seq)
	}
	delete(o.calls, seq)
}

// flush writes pending output events to the transcript.
func (o *sessionOutput) flush(ctx context.Context) {
	o.mu.Lock()
	if len(o.pending) == 0 {
		o.mu.Unlock()
		return
	}
	evs := o.pending
	o.pending, o.bytes = nil, 0
	// Hold the lock while writing so batches reach the store in order.
	defer o.mu.Unlock()
	if err := o.s.store.AppendEvents(ctx, o.sessionID, evs); err != nil {
		if ctx.Err() == nil {
			o.s.log.Warn("record output", "session", o.sessionID, "err", err)
		}
		return
	}
	o.s.topics.publish(o.sessionID, evs...)
}
