package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outpost-sh/outpost/api"
)

// authTransport adds a bearer token to each request.
type authTransport struct{ token string }

func (a authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	return http.DefaultTransport.RoundTrip(r)
}

// An outside agent driving tools over MCP is under the same rules: a deny
// rule's refusal is a tool error at once, an ask waits in the tool call
// until a person approves, and the machine sees only the approved call.
func TestApprovalMCP(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.mustDo(201, "POST", "/v1/outposts", ts.admin, api.CreateOutpostRequest{Name: "guarded", ApprovalRules: []api.ApprovalRule{
		pushRule, {Action: api.ApprovalDeny, Tool: "exec", Match: map[string]string{"command": `rm -rf`}, Reason: "Never."}}}, nil)
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"guarded","agent":{"kind":"external"}}`, &s)
	id := s.Metadata.SessionID
	r := connect(ts, id)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: ts.url + "/v1/sessions/" + id + "/mcp", DisableStandaloneSSE: true, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: authTransport{ts.admin}}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "rm -rf /tmp/x"}})
	if err != nil || !res.IsError || !strings.Contains(textOf(res), "Never.") {
		t.Fatalf("denied call: %+v %v", res, err)
	}

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "git push origin main"}})
		got <- answer{res, err}
	}()
	held := waitHeld(ts, id, 2)
	ts.mustDo(200, "POST", "/v1/sessions/"+id+"/calls/"+strconv.FormatInt(held.CallSeq, 10)+"/approve", ts.admin, nil, nil)
	call := r.expect(api.FrameCall)
	if call.Seq != 2 || !strings.Contains(string(call.Args), "git push origin main") {
		t.Fatalf("the machine's first call: %+v", call)
	}
	r.send(api.Frame{Type: api.FrameResult, Seq: 2, OK: true, Value: json.RawMessage(`{"exit_code":0,"stdout":"pushed"}`)})
	a := <-got
	if a.err != nil || a.res.IsError {
		t.Fatalf("approved call answered %+v %v", a.res, a.err)
	}
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
