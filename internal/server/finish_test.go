package server

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
)

// fakeModel answers every call with the next of its texts, without tool
// calls, and records the requests.
type fakeModel struct {
	mu      sync.Mutex
	answers []string
	reqs    []llm.Request
}

func (f *fakeModel) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	text := "Done."
	if n := len(f.reqs); n < len(f.answers) {
		text = f.answers[n]
	}
	f.reqs = append(f.reqs, req)
	return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Text: text},
		Usage: llm.Usage{PromptTokens: 10, CompletionTokens: 1}, StopReason: "stop"}, nil
}

func (f *fakeModel) requests() []llm.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]llm.Request(nil), f.reqs...)
}

// TestMessageBetweenAnswerAndEnd sends a user message exactly between the
// model's answer without tool calls and the end of a non-interactive
// session: the message is not lost, the model gets another turn with it,
// and only then does the session end. A message after the end is refused.
func TestMessageBetweenAnswerAndEnd(t *testing.T) {
	t.Parallel()
	model := &fakeModel{answers: []string{"Done.", "Done, changelog too."}}
	paused := make(chan string)
	resume := make(chan struct{})
	var once sync.Once
	ts := startServer(t, Options{LLM: model, beforeFinish: func(id string) {
		// The first answer is on the transcript; the runner is about to end.
		once.Do(func() {
			paused <- id
			<-resume
		})
	}})
	ts.outpost("chat")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"chat","prompt":"Do the task.","agent":{"kind":"llm"}}`, &s)
	id := s.Metadata.SessionID
	claim := ts.claimFor(id, "m")
	r, _ := dialGateway(t, ts.srv.gatewayURL, id, claim.Status.ConnectToken)
	r.send(api.Frame{Type: api.FrameHello, SessionID: id})
	r.expect(api.FrameWelcome)

	select {
	case <-paused:
	case <-time.After(15 * time.Second):
		t.Fatal("the runner never got to the end of the first answer")
	}
	var msg api.Event
	ts.mustDo(202, "POST", "/v1/sessions/"+id+"/messages", ts.admin, api.MessageRequest{Text: "Also the changelog."}, &msg)
	close(resume)
	if got := auditOf(ts, id); strings.Join(got, " ") != "session.create session.message" {
		t.Errorf("audit entries of the session: %q", got)
	}

	r.expect(api.FrameEnd)
	ts.mustDo(200, "GET", "/v1/sessions/"+id, ts.admin, nil, &s)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished || s.Status.Usage.ModelCalls != 2 {
		t.Fatalf("session %+v, want exit/finished after 2 model calls", s.Status)
	}
	reqs := model.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	var roles []string
	for _, m := range reqs[1].Messages {
		roles = append(roles, m.Role+":"+m.Text)
	}
	if got := strings.Join(roles, "|"); got != "user:Do the task.|assistant:Done.|user:Also the changelog." {
		t.Fatalf("second request %s", got)
	}
	var evs api.EventList
	ts.mustDo(200, "GET", "/v1/sessions/"+id+"/events", ts.admin, nil, &evs)
	var answers []api.Event
	for _, ev := range evs.Items {
		if ev.Type == api.EventMessage && ev.Role == api.RoleAssistant {
			answers = append(answers, ev)
		}
	}
	if len(answers) != 2 || answers[0].Seen >= msg.Seq || answers[1].Seen < msg.Seq {
		t.Fatalf("answers %+v around the message at seq %d", answers, msg.Seq)
	}
	if last := evs.Items[len(evs.Items)-1]; last.Type != api.EventEnd {
		t.Fatalf("transcript ends with %+v", last)
	}

	// Once the session is over, a message is refused, not left unanswered.
	if code := ts.do("POST", "/v1/sessions/"+id+"/messages", ts.admin, api.MessageRequest{Text: "And the README."}, nil); code != 409 {
		t.Fatalf("message to an ended session: %d, want 409", code)
	}
	if n := len(model.requests()); n != 2 {
		t.Fatalf("%d model calls after the refused message, want 2", n)
	}
}
