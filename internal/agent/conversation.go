package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
	"github.com/outpost-sh/outpost/internal/store"
)

// conversation is an llm session's messages, folded from its transcript:
// the transcript is the one durable record of the conversation, so a
// restarted server or a new machine continues where it was.
//
// A runner starts a conversation by reading the whole transcript (the
// recovery path). After that it applies the events of its own transactions
// and those the committed-event feed brings, in transcript order, and reads
// the store only to fill a gap in that order or after the feed lagged.
type conversation struct {
	limit    int // characters of one tool result shown to the model
	msgs     []llm.Message
	lastSeen int64 // the last transcript event applied
	lastCall int64 // the highest call seq seen
	steps    int   // model calls made
	// pending maps the calls of the last assistant message that have no
	// result yet to their tool-call ids.
	pending map[int64]string
	// inbox holds user messages and notes the model has not seen yet, with
	// their event seqs. They join the conversation at the next model call
	// (after the results of outstanding tool calls): an assistant message
	// records the last event its model had seen, so a rebuild places each
	// message where the model saw it.
	inbox  []inboxMsg
	output map[int64]*strings.Builder // output of running exec calls

	// ahead holds committed events past lastSeen not applied yet, by seq:
	// they wait for the events before them.
	ahead map[int64]api.Event
	// stale says the store must be read: the feed lost events, or a read
	// failed.
	stale bool
	// calls are the session's calls the runner knows, by seq, with their
	// arguments as sent (the transcript shows them redacted).
	calls map[int64]store.Call
	// display is the desktop's size as the last computer result gave it;
	// zero before one came.
	display api.DesktopSize
}

// keepImages is how many tool-result images, the newest, a request to the
// model carries; older ones are replaced by a line saying so. Screenshots
// cost a model a thousand tokens and more each, and an agent driving a
// desktop takes one with every action: without a bound, a long session's
// requests grow until they pass the model's context. Anthropic's reference
// computer-use loop keeps the last three the same way.
const keepImages = 3

// imageLeftOut replaces an image past keepImages in a request.
const imageLeftOut = "[an older screenshot, left out of the conversation; the transcript keeps it]"

// inboxMsg is a message waiting for the model.
type inboxMsg struct {
	seq int64
	msg llm.Message
}

// request returns the messages to send the model now, with the images of
// tool results but the last keepImages replaced by a line.
func (c *conversation) request() []llm.Message {
	msgs := append([]llm.Message(nil), c.msgs...)
	for _, m := range c.inbox {
		msgs = append(msgs, m.msg)
	}
	return pruneImages(msgs, keepImages)
}

// pruneImages replaces the images of msgs but the last keep with a line
// in their tool message's text. It changes copies: the messages' Images
// slices are shared with the conversation.
func pruneImages(msgs []llm.Message, keep int) []llm.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		n := len(msgs[i].Images)
		if n == 0 {
			continue
		}
		if keep >= n {
			keep -= n
			continue
		}
		m := msgs[i]
		drop := n - keep
		m.Images = append([]llm.Image(nil), m.Images[drop:]...)
		if len(m.Images) == 0 {
			m.Images = nil
		}
		for range drop {
			m.Text += "\n" + imageLeftOut
		}
		msgs[i], keep = m, 0
	}
	return msgs
}

// computerDisplay is the display the model is told its computer tool
// drives: the size of its screenshots, from the display's size as the
// last computer result gave it, else as the session asked for it.
func (c *conversation) computerDisplay(spec *api.DesktopSize) *llm.ComputerDisplay {
	d := c.display
	if d.Width <= 0 || d.Height <= 0 {
		d = api.DesktopSize{Width: api.DefaultDesktopWidth, Height: api.DefaultDesktopHeight}
		if spec != nil && spec.Width > 0 && spec.Height > 0 {
			d = *spec
		}
	}
	w, h := api.ComputerScreenshotSize(d.Width, d.Height)
	return &llm.ComputerDisplay{Width: w, Height: h}
}

func newConversation(limit int) *conversation {
	return &conversation{limit: limit, pending: map[int64]string{}, output: map[int64]*strings.Builder{},
		ahead: map[int64]api.Event{}, calls: map[int64]store.Call{}}
}

// take keeps committed events for applyAhead. Events without a seq (live
// output past the cap) are not on the transcript and a rebuild would not
// see them: they are left out.
func (c *conversation) take(evs ...api.Event) {
	for _, ev := range evs {
		if ev.Seq > c.lastSeen {
			c.ahead[ev.Seq] = ev
		}
	}
}

// takeCalls records calls a transaction wrote.
func (c *conversation) takeCalls(calls []store.Call) {
	for _, call := range calls {
		c.calls[call.Seq] = call
		c.lastCall = max(c.lastCall, call.Seq)
	}
}

// applyAhead applies the kept events that follow the last one applied
// without a gap. It reports whether events remain, past a gap.
func (c *conversation) applyAhead() (gap bool) {
	for {
		ev, ok := c.ahead[c.lastSeen+1]
		if !ok {
			break
		}
		delete(c.ahead, ev.Seq)
		c.apply(ev)
	}
	c.prune()
	return len(c.ahead) > 0
}

// prune forgets kept events applied already.
func (c *conversation) prune() {
	for seq := range c.ahead {
		if seq <= c.lastSeen {
			delete(c.ahead, seq)
		}
	}
}

// apply folds one transcript event into the conversation.
func (c *conversation) apply(ev api.Event) {
	c.lastSeen = max(c.lastSeen, ev.Seq)
	switch ev.Type {
	case api.EventMessage:
		switch ev.Role {
		case api.RoleUser:
			c.inbox = append(c.inbox, inboxMsg{ev.Seq, llm.Message{Role: llm.RoleUser, Text: ev.Text}})
		case api.RoleAssistant:
			// What the model had seen when it answered joins the history
			// before its answer; later messages wait for the next call.
			var later []inboxMsg
			for _, m := range c.inbox {
				if ev.Seen == 0 || m.seq <= ev.Seen {
					c.msgs = append(c.msgs, m.msg)
				} else {
					later = append(later, m)
				}
			}
			c.inbox = later
			c.steps++
			m := llm.Message{Role: llm.RoleAssistant, Text: ev.Text}
			for _, tc := range ev.ToolCalls {
				m.ToolCalls = append(m.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Tool, Arguments: json.RawMessage(tc.Arguments)})
				c.pending[tc.CallSeq] = tc.ID
				c.lastCall = max(c.lastCall, tc.CallSeq)
			}
			c.msgs = append(c.msgs, m)
		}
	case api.EventResume:
		// The session moved to another machine: the model is told, as a
		// user note, derived from the transcript like everything else.
		c.inbox = append(c.inbox, inboxMsg{ev.Seq, llm.Message{Role: llm.RoleUser, Text: "[outpost] " + ev.Reason +
			" Files of this session outside its repositories, and uncommitted work, may be missing on this machine; check before you go on."}})
	case api.EventRestore:
		// How the new machine cloned the session's repositories again.
		c.inbox = append(c.inbox, inboxMsg{ev.Seq, llm.Message{Role: llm.RoleUser, Text: "[outpost] " + ev.Reason}})
	case api.EventOutput:
		if _, ok := c.pending[ev.CallSeq]; ok {
			b := c.output[ev.CallSeq]
			if b == nil {
				b = &strings.Builder{}
				c.output[ev.CallSeq] = b
			}
			if b.Len() < 4*c.limit {
				b.WriteString(ev.Text)
			}
		}
	case api.EventResult:
		id, ok := c.pending[ev.CallSeq]
		if !ok {
			return
		}
		delete(c.pending, ev.CallSeq)
		ev, images, display := splitImages(ev)
		if display.Width > 0 && display.Height > 0 {
			c.display = display
		}
		c.msgs = append(c.msgs, llm.Message{Role: llm.RoleTool, ToolCallID: id, Text: c.resultText(ev), IsError: ev.OK == nil || !*ev.OK,
			Images: images})
		delete(c.output, ev.CallSeq)
	}
}

// resultText renders a call's result for the model, cut to the limit; the
// whole result stays on the transcript.
func (c *conversation) resultText(ev api.Event) string {
	var b strings.Builder
	if out := c.output[ev.CallSeq]; out != nil {
		b.WriteString(out.String())
	}
	switch {
	case ev.ExitCode != nil:
		// As a shell or Go's os/exec says it, after the output; the error
		// follows only when it adds something (a timeout, a signal), not
		// when it repeats the status.
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		if *ev.ExitCode >= 0 {
			fmt.Fprintf(&b, "exit status %d", *ev.ExitCode)
		}
		if e := ev.Error; e != "" && e != fmt.Sprintf("exit code %d", *ev.ExitCode) {
			if *ev.ExitCode >= 0 {
				b.WriteString(": ")
			}
			b.WriteString(e)
		}
	case ev.Error != "":
		b.WriteString(ev.Error)
	case len(ev.Value) > 0:
		// Compact, as the store keeps it: a rebuilt conversation and the
		// one the runner kept show the model the same text.
		var v bytes.Buffer
		if json.Compact(&v, ev.Value) != nil {
			v.Reset()
			v.Write(ev.Value)
		}
		b.Write(v.Bytes())
	}
	text := b.String()
	if len(text) > c.limit {
		cut := len(text) - c.limit
		text = text[:c.limit] + fmt.Sprintf("\n[%d more characters cut; the whole result is on the session's transcript]", cut)
	}
	return text
}

// lastAssistantDone reports whether the model's last answer asked for no
// tool calls (the model is done or waits for the user).
func (c *conversation) lastAssistantDone() bool {
	if len(c.inbox) > 0 {
		return false // something new for the model
	}
	for i := len(c.msgs) - 1; i >= 0; i-- {
		switch c.msgs[i].Role {
		case llm.RoleAssistant:
			return len(c.msgs[i].ToolCalls) == 0
		case llm.RoleUser:
			return false
		}
	}
	return false
}

// catchUp reads the transcript events written since the last one applied
// from the store and applies them.
func (r *runner) catchUp(ctx context.Context, conv *conversation) error {
	for {
		evs, err := r.l.opts.Store.ListEvents(ctx, r.sessionID, conv.lastSeen, 500)
		if err != nil {
			conv.stale = true
			return err
		}
		for _, ev := range evs {
			conv.apply(ev)
		}
		if len(evs) < 500 {
			conv.prune()
			conv.stale = false
			return nil
		}
	}
}

// sync brings conv up to the session's committed events: those of the
// runner's own transactions and those the feed brought, reading the store
// only when the feed lost events or they leave a gap. The first sync
// subscribes and reads the whole transcript.
func (r *runner) sync(ctx context.Context, conv *conversation) error {
	r.drainFeed(conv)
	if r.sub == nil {
		// Subscribe before reading the store, so nothing slips between.
		r.sub = r.l.opts.Feed.Subscribe(r.sessionID)
		conv.stale = true
	}
	if conv.applyAhead() || conv.stale {
		return r.catchUp(ctx, conv)
	}
	return nil
}

// drainFeed takes the events the feed holds for the runner, without
// waiting; a lagged subscription is dropped, for sync to renew.
func (r *runner) drainFeed(conv *conversation) {
	for r.sub != nil {
		select {
		case ev := <-r.sub.Events():
			conv.take(ev)
		case <-r.sub.Lagged():
			r.dropFeed(conv)
		default:
			return
		}
	}
}

// dropFeed ends the runner's subscription after it lost events.
func (r *runner) dropFeed(conv *conversation) {
	r.sub.Close()
	r.sub = nil
	conv.stale = true
}

// feedEvents and feedLagged are the subscription's channels for a select
// that waits for something else meanwhile; nil (never ready) without one.
func (r *runner) feedEvents() <-chan api.Event {
	if r.sub == nil || r.conv == nil {
		return nil
	}
	return r.sub.Events()
}

func (r *runner) feedLagged() <-chan struct{} {
	if r.sub == nil || r.conv == nil {
		return nil
	}
	return r.sub.Lagged()
}

// splitImages takes the screenshot out of a computer result: the model
// gets it as an image, and the result's text without its base64. It also
// returns the display's size the result gives (zero if none).
func splitImages(ev api.Event) (api.Event, []llm.Image, api.DesktopSize) {
	if ev.Tool != api.ToolComputer || len(ev.Value) == 0 {
		return ev, nil, api.DesktopSize{}
	}
	var v api.ComputerResult
	if json.Unmarshal(ev.Value, &v) != nil {
		return ev, nil, api.DesktopSize{}
	}
	display := api.DesktopSize{Width: v.DisplayWidth, Height: v.DisplayHeight}
	if v.Image == nil {
		return ev, nil, display
	}
	img := llm.Image{MediaType: v.Image.MediaType, Data: v.Image.Data}
	v.Image = nil
	b, err := json.Marshal(v)
	if err != nil {
		return ev, nil, display
	}
	ev.Value = b
	return ev, []llm.Image{img}, display
}
