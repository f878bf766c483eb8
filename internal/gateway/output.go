package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
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
// (OutputConfig.Blobs) as <session>/<seq>.log: streamed while the call runs,
// stored when it ends (or when its connection does), and served by every
// replica (GET /v1/sessions/{session}/output/{seq}, served by the server
// from the keys SpillKey and SpillPart name). A call whose
// remote reconnected while it ran spills the rest into a further part,
// <seq>.log.1, .2, …, read after the first.
//
// What the server keeps is bounded, so that one session cannot fill its
// disk: a call keeps at most OutputConfig.MaxCallBytes (transcript and
// spill together), a session at most OutputConfig.MaxSessionBytes of
// spilled output over all its calls. Output past either is dropped, and
// the call's last output event says how much (DroppedBytes). The spilled
// output goes with the session's artifacts (the server's retention).

// unboundedSpill is the blob limit of a spilled part when calls have no
// bound: in effect none.
const unboundedSpill = 1 << 40

// The caps that drop output, as the transcript's note names them.
const (
	capCall    = "call"
	capSession = "session"
)

// SpillKey is the blob key of part n of the spilled output of call seq.
func SpillKey(sessionID string, seq int64, part int) string {
	if part == 0 {
		return fmt.Sprintf("%s/%d.log", sessionID, seq)
	}
	return fmt.Sprintf("%s/%d.log.%d", sessionID, seq, part)
}

// SessionOutput turns a session's output frames into transcript events.
type SessionOutput struct {
	cfg       *OutputConfig
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

// OutputConfig is what Output writes to and the bounds it keeps.
type OutputConfig struct {
	// Store records the transcript's output events.
	Store interface {
		AppendEvents(ctx context.Context, sessionID string, events []api.Event) error
	}
	// Blobs holds the spilled output, by SpillKey.
	Blobs blob.Store
	// Publish hands events to the session's live followers once stored
	// (or, for spilled output, at once).
	Publish func(sessionID string, events ...api.Event)
	Log     *slog.Logger
	Now     func() time.Time
	// CapBytes is how much output of one call the transcript keeps.
	CapBytes int64
	// MaxCallBytes bounds the output of one call kept (transcript and
	// spill); MaxSessionBytes the spilled output of one session. Not
	// positive: no bound.
	MaxCallBytes    int64
	MaxSessionBytes int64
}

// Output holds the output state of every session whose remote is
// connected to this replica.
type Output struct {
	cfg OutputConfig

	mu       sync.Mutex // guards sessions
	sessions map[string]*SessionOutput
}

// NewOutput returns an Output that writes as cfg says.
func NewOutput(cfg OutputConfig) *Output {
	return &Output{cfg: cfg, sessions: map[string]*SessionOutput{}}
}

// For returns the session's output state, creating it.
func (out *Output) For(sessionID string) *SessionOutput {
	out.mu.Lock()
	defer out.mu.Unlock()
	o := out.sessions[sessionID]
	if o == nil {
		o = &SessionOutput{cfg: &out.cfg, sessionID: sessionID, calls: map[int64]*callOutput{}}
		out.sessions[sessionID] = o
	}
	return o
}

// Drop forgets a finished session's output state.
func (out *Output) Drop(sessionID string) {
	out.mu.Lock()
	o := out.sessions[sessionID]
	delete(out.sessions, sessionID)
	out.mu.Unlock()
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

// Add takes one output frame.
func (o *SessionOutput) Add(ctx context.Context, f api.OutputFrame) {
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
	if room := o.cfg.CapBytes - c.stored; room > 0 {
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
			o.cfg.Log.Warn("spill output", "session", o.sessionID, "seq", f.Seq, "err", err)
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
			o.cfg.Log.Warn("spill output", "session", o.sessionID, "seq", f.Seq, "err", err)
		}
		live = append(live, api.Event{SessionID: o.sessionID, Type: api.EventOutput, CallSeq: f.Seq, Stream: f.Stream, Text: text, Spilled: true})
	}
	full := o.bytes >= outputFlushBytes
	o.mu.Unlock()
	if full {
		o.Flush(ctx)
	}
	if len(live) > 0 {
		o.cfg.Publish(o.sessionID, live...)
	}
}

// appendLocked merges text into the last pending event of the same call
// and stream, or starts a new one.
func (o *SessionOutput) appendLocked(seq int64, stream, text string) {
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
	o.pending = append(o.pending, api.Event{Type: api.EventOutput, Time: o.cfg.Now().UnixMilli(), CallSeq: seq, Stream: stream, Text: text})
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
func (o *SessionOutput) spillRoomLocked(ctx context.Context, seq int64, c *callOutput) (int64, string, error) {
	if !o.spillKnown {
		infos, err := o.cfg.Blobs.List(ctx, o.sessionID+"/")
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
		parts, err := o.cfg.Blobs.List(ctx, SpillKey(o.sessionID, seq, 0))
		if err != nil {
			return 0, "", fmt.Errorf("list spilled output of %s call %d: %w", o.sessionID, seq, err)
		}
		var stored int64
		c.part = 0
		for _, p := range parts {
			if n, ok := SpillPart(p.Key, o.sessionID, seq); ok {
				stored += p.Size
				c.part = max(c.part, n+1)
			}
		}
		c.earlier = max(stored-c.spilled, 0)
		c.listed = true
	}
	room, cause := int64(unboundedSpill), ""
	if m := o.cfg.MaxCallBytes; m > 0 {
		room, cause = m-c.stored-c.earlier-c.spilled, capCall
	}
	if m := o.cfg.MaxSessionBytes; m > 0 && m-o.spilled < room {
		room, cause = m-o.spilled, capSession
	}
	return max(room, 0), cause, nil
}

// spillLocked writes text to the part of call seq being spilled, opening
// it first; spillRoomLocked has listed the call's parts.
func (o *SessionOutput) spillLocked(ctx context.Context, seq int64, c *callOutput, text string) error {
	if c.spill == nil {
		limit := int64(unboundedSpill)
		if m := o.cfg.MaxCallBytes; m > 0 {
			limit = m
		}
		c.spill = blob.NewWriter(context.WithoutCancel(ctx), o.cfg.Blobs, SpillKey(o.sessionID, seq, c.part), limit)
	}
	c.spilled += int64(len(text))
	o.spilled += int64(len(text))
	_, err := io.WriteString(c.spill, text)
	return err
}

// storeSpillLocked stores the part of call seq's output being spilled.
func (o *SessionOutput) storeSpillLocked(c *callOutput, seq int64) {
	if c.spill == nil {
		return
	}
	if _, _, err := c.spill.Commit(); err != nil {
		o.cfg.Log.Warn("store spilled output", "session", o.sessionID, "seq", seq, "err", err)
	}
	c.spill = nil
	c.listed = false // a further part follows the one just stored
}

// StoreSpills stores what every call of the session spilled so far: its
// connection ended.
func (o *SessionOutput) StoreSpills() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for seq, c := range o.calls {
		o.storeSpillLocked(c, seq)
	}
}

// Finish ends a call's output: it notes where output past the cap went
// and returns the events not yet on the transcript (of this call, and of
// others since the last flush), for the call's result to record in its
// own transaction, one commit fewer a call. Whoever does not record them
// with the result gives them to Record.
func (o *SessionOutput) Finish(seq int64) []api.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.calls[seq]; c != nil {
		for stream, carry := range c.carry {
			if len(carry) > 0 {
				o.appendLocked(seq, stream, strings.ToValidUTF8(string(carry), "\uFFFD"))
			}
		}
		if c.spilled > 0 {
			o.pending = append(o.pending, api.Event{Type: api.EventOutput, Time: o.cfg.Now().UnixMilli(), CallSeq: seq, Spilled: true,
				Text: fmt.Sprintf("[%d more bytes of output are kept on the server: GET /v1/sessions/%s/output/%d]", c.spilled, o.sessionID, seq)})
		}
		if c.dropped > 0 {
			o.pending = append(o.pending, api.Event{Type: api.EventOutput, Time: o.cfg.Now().UnixMilli(), CallSeq: seq, Spilled: true,
				DroppedBytes: c.dropped, Text: o.droppedNote(c)})
		}
		o.closeCallLocked(seq)
	}
	evs := o.pending
	o.pending, o.bytes = nil, 0
	return evs
}

// Record writes events Finish returned that no result's transaction
// recorded, and hands them to the live followers.
func (o *SessionOutput) Record(ctx context.Context, evs []api.Event) {
	if len(evs) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.recordLocked(ctx, evs)
}

// droppedNote is the transcript's note on the output of c that a cap
// dropped.
func (o *SessionOutput) droppedNote(c *callOutput) string {
	if c.cause == capSession {
		return fmt.Sprintf("[output truncated: %d more bytes were dropped; this session's output past the transcript's cap reached %d bytes, the most the server keeps for one session (outpost server --max-session-output-bytes)]",
			c.dropped, o.cfg.MaxSessionBytes)
	}
	return fmt.Sprintf("[output truncated: %d more bytes were dropped; the server keeps at most %d bytes of one call's output (outpost server --max-call-output-bytes)]",
		c.dropped, o.cfg.MaxCallBytes)
}

func (o *SessionOutput) closeCallLocked(seq int64) {
	if c := o.calls[seq]; c != nil {
		o.storeSpillLocked(c, seq)
	}
	delete(o.calls, seq)
}

// Flush writes pending output events to the transcript.
func (o *SessionOutput) Flush(ctx context.Context) {
	o.mu.Lock()
	if len(o.pending) == 0 {
		o.mu.Unlock()
		return
	}
	evs := o.pending
	o.pending, o.bytes = nil, 0
	// Hold the lock while writing so batches reach the store in order.
	defer o.mu.Unlock()
	o.recordLocked(ctx, evs)
}

func (o *SessionOutput) recordLocked(ctx context.Context, evs []api.Event) {
	if err := o.cfg.Store.AppendEvents(ctx, o.sessionID, evs); err != nil {
		if ctx.Err() == nil {
			o.cfg.Log.Warn("record output", "session", o.sessionID, "err", err)
		}
		return
	}
	o.cfg.Publish(o.sessionID, evs...)
}

// SpillPart parses the part number of key, a blob key of the spilled
// output of call seq of session sessionID.
func SpillPart(key, sessionID string, seq int64) (int, bool) {
	rest, ok := strings.CutPrefix(key, SpillKey(sessionID, seq, 0))
	if !ok {
		return 0, false
	}
	if rest == "" {
		return 0, true
	}
	n, err := strconv.Atoi(strings.TrimPrefix(rest, "."))
	if err != nil || n <= 0 || !strings.HasPrefix(rest, ".") {
		return 0, false
	}
	return n, true
}
