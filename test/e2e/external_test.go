//go:build linux

package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

type bearer struct {
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
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

// TestExternalAgentOverMCP drives an external session from outside: the
// official MCP Go SDK's client lists the session's tools and runs exec on
// the real remote; plain HTTP runs another call; the stdio bridge serves
// the same tools; a read-only token is refused; end_session ends it.
func TestExternalAgentOverMCP(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "outside")
	startWorker(t, c, "outside", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "outside", Title: "driven from outside",
		Agent: api.Agent{Kind: api.AgentExternal}, Env: map[string]string{"GREETING": "hi-from-env"}})
	waitfor.Within(t, 30*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	endpoint := c.url + "/v1/sessions/" + id + "/mcp"
	connect := func(tok string) (*mcp.ClientSession, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, DisableStandaloneSSE: true, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearer{tok}}}, nil)
	}
	var reader api.CreateTokenResponse
	if code := c.api("POST", "/v1/tokens", c.admin, api.CreateTokenRequest{Scopes: []string{api.ScopeSessionsRead}}, &reader); code != 201 {
		t.Fatalf("token: %d", code)
	}
	if _, err := connect(reader.Secret); err == nil {
		t.Fatal("a sessions.read token was allowed to drive the session")
	}
	cs, err := connect(c.admin)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
	}
	for _, n := range append(api.ToolNames(), "end_session") {
		if !names[n] {
			t.Errorf("tool %s not listed", n)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "echo mcp says $GREETING"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(textOf(res), "mcp says hi-from-env") {
		t.Fatalf("exec over MCP: error=%v %q", res.IsError, textOf(res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "no/such/file"}})
	if err != nil || !res.IsError {
		t.Fatalf("reading a missing file: %v %+v", err, res)
	}

	var direct api.ToolResult
	if code := c.api("POST", "/v1/sessions/"+id+"/tools/exec", c.admin, map[string]any{"argv": []string{"echo", "plain-http"}}, &direct); code != 200 ||
		!direct.OK || !strings.Contains(direct.Output, "plain-http") {
		t.Fatalf("exec over HTTP: %d %+v", code, direct)
	}
	if code := c.api("POST", "/v1/sessions/"+id+"/tools/rm_rf", c.admin, map[string]any{}, nil); code != 400 {
		t.Fatalf("unknown tool over HTTP: %d, want 400", code)
	}

	// The stdio bridge serves the same tools to clients that launch processes.
	bridge := exec.Command(binary, "mcp", "--session", id)
	bridge.Env = append(os.Environ(), c.env(c.admin)...)
	bc, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-stdio", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: bridge}, nil)
	if err != nil {
		t.Fatalf("connect to outpost mcp: %v", err)
	}
	res, err = bc.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "echo through-the-bridge"}})
	if err != nil || !strings.Contains(textOf(res), "through-the-bridge") {
		t.Fatalf("exec through the bridge: %v %q", err, textOf(res))
	}
	bc.Close()

	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "end_session", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	s := c.waitFinal(id, 30*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("after end_session: %+v", s.Status)
	}
	calls := 0
	for _, ev := range c.events(id) {
		if ev.Type == api.EventCall {
			calls++
		}
	}
	if calls != 4 {
		t.Errorf("%d calls on the transcript, want 4 (two over MCP, one over HTTP, one through the bridge)", calls)
	}
}
