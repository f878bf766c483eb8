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

// spillLimit bounds one part of a call's spilled output: in effect no cap,
// as when spills were files.
const spillLimit = 1 << 40

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
}

// callOutput is the output accounting of one call.
type callOutput struct {
	stored  int64
	spilled int64
	carry   map[string][]byte // an incomplete UTF-8 sequence per stream
	spill   *blob.Writer      // the part being spilled, or nil
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
		keep := text
		if int64(len(keep)) > room {
			keep = keep[:room]
			// Do not split a rune at the cap.
			for len(keep) > 0 && !utf8.RuneStart(text[len(keep)]) {
				keep = keep[:len(keep)-1]
			}
		}
		o.appendLocked(f.Seq, f.Stream, keep)
		c.stored += int64(len(keep))
		text = text[len(keep):]
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

func (o *sessionOutput) spillLocked(ctx context.Context, seq int64, c *callOutput, text string) error {
	if c.spill == nil {
		// A part already stored is an earlier connection's: go on in the
		// next.
		parts, err := o.s.outputBlobs.List(ctx, spillKey(o.sessionID, seq, 0))
		if err != nil {
			return err
		}
		part := 0
		for _, p := range parts {
			if n, ok := spillPart(p.Key, o.sessionID, seq); ok && n >= part {
				part = n + 1
			}
		}
		c.spill = blob.NewWriter(context.WithoutCancel(ctx), o.s.outputBlobs, spillKey(o.sessionID, seq, part), spillLimit)
	}
	c.spilled += int64(len(text))
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
		o.closeCallLocked(seq)
	}
	o.mu.Unlock()
	o.flush(ctx)
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
