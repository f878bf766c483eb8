package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-sh/outpost/api"
)

// resultHandler is welcomingHandler that takes a result's held output, or
// leaves it to the gateway.
type resultHandler struct {
	welcomingHandler
	take bool

	rmu    sync.Mutex
	output []api.Event
	done   chan struct{} // closed at the first result
}

func (h *resultHandler) Result(_ context.Context, _ *Conn, f api.Frame, output []api.Event) bool {
	h.rmu.Lock()
	h.output = append(h.output, output...)
	h.rmu.Unlock()
	close(h.done)
	return h.take
}

// appendStore is the transcript store of Output: it keeps what is
// appended.
type appendStore struct {
	mu     sync.Mutex
	events []api.Event
}

func (s *appendStore) AppendEvents(_ context.Context, _ string, evs []api.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, evs...)
	return nil
}

func (s *appendStore) texts() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, ev := range s.events {
		b.WriteString(ev.Text)
	}
	return b.String()
}

// TestResultCarriesHeldOutput: the output a call's result finds held is
// handed to the Handler with the result, not written; when the Handler
// does not take it, the gateway writes it.
func TestResultCarriesHeldOutput(t *testing.T) {
	t.Parallel()
	for _, take := range []bool{true, false} {
		h := &resultHandler{take: take, done: make(chan struct{})}
		st := &appendStore{}
		out := NewOutput(OutputConfig{Store: st, Publish: func(string, ...api.Event) {}, Log: slog.New(slog.DiscardHandler),
			Now: time.Now, CapBytes: 1 << 20})
		hub := NewHub()
		g := New(hub, out, h, slog.New(slog.DiscardHandler), Options{})
		srv := httptest.NewServer(http.HandlerFunc(g.ServeHTTP))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		ws, welcome := dialHello(ctx, t, "ws"+strings.TrimPrefix(srv.URL, "http"), "i1")
		if welcome.Type != api.FrameWelcome {
			t.Fatalf("answer to hello: %+v", welcome)
		}
		for _, chunk := range []string{"one ", "two\n"} {
			if err := ws.Write(ctx, websocket.MessageBinary, api.OutputFrame{Seq: 1, Stream: "stdout", Data: []byte(chunk)}.AppendBinary(nil)); err != nil {
				t.Fatal(err)
			}
		}
		res, _ := json.Marshal(api.Frame{Type: api.FrameResult, V: int(api.CurrentProtocolVersion), Seq: 1, OK: true})
		if err := ws.Write(ctx, websocket.MessageText, res); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.done:
		case <-ctx.Done():
			t.Fatal("no result reached the Handler")
		}
		h.rmu.Lock()
		handed := len(h.output)
		var text string
		for _, ev := range h.output {
			text += ev.Text
		}
		h.rmu.Unlock()
		if handed == 0 || text != "one two\n" || h.output[0].CallSeq != 1 {
			t.Fatalf("take=%v: the result came with %d events %q, want the held output", take, handed, text)
		}
		if take {
			// Whatever the gateway writes later (a flush) would come after
			// the result; nothing is written by then.
			time.Sleep(3 * flushEvery)
			if got := st.texts(); got != "" {
				t.Errorf("take=true: the gateway wrote %q itself as well", got)
			}
		} else {
			waitFor(ctx, t, "the output written by the gateway", func() bool { return st.texts() == "one two\n" })
		}
		_ = ws.CloseNow()
		hub.CloseAll()
		srv.Close()
		cancel()
	}
}
