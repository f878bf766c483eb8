//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	_ "image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

// onePixelPNG is a 1×1 PNG.
const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

// imageOf returns the first image content of a tool result.
func imageOf(res *mcp.CallToolResult) *mcp.ImageContent {
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			return img
		}
	}
	return nil
}

// TestExternalSessionTokenAndImages drives an external session over MCP
// with a token limited to it, through the official MCP Go SDK's client:
// an image the session uploads and a browser screenshot come back as MCP
// image content (the PNG itself, not a path on the machine); the token
// reaches no other session; it stops working when the session ends.
func TestExternalSessionTokenAndImages(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	token := setupOutpost(t, c, "outside-img")
	startWorker(t, c, "outside-img", token)
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "outside-img", Title: "images from outside", Agent: api.Agent{Kind: api.AgentExternal}})
	other := createSession(t, c, api.CreateSessionRequest{Outpost: "outside-img", Title: "another", Agent: api.Agent{Kind: api.AgentExternal}})
	waitfor.Within(t, 30*time.Second, "the session to run", func() bool { return c.session(id).Status.Status == api.StatusRunning })

	// The token, made by the CLI as the docs say.
	out, err := exec.Command(binary, append([]string{"tokens", "create", "--session", id}, "--server", c.url, "--token", c.admin)...).Output()
	if err != nil {
		t.Fatalf("tokens create --session: %v", err)
	}
	secret := strings.TrimSpace(string(out))

	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	connect := func(session string) (*mcp.ClientSession, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
		return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.url + "/v1/sessions/" + session + "/mcp",
			DisableStandaloneSSE: true, MaxRetries: -1, HTTPClient: &http.Client{Transport: bearer{secret}}}, nil)
	}
	if _, err := connect(other); err == nil {
		t.Fatal("the token of one session reached another session's MCP endpoint")
	}
	cs, err := connect(id)
	if err != nil {
		t.Fatalf("connect with the session's token: %v", err)
	}
	defer cs.Close()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"command": "echo " + onePixelPNG + " | base64 -d > dot.png"}})
	if err != nil || res.IsError {
		t.Fatalf("write the PNG: %v %q", err, textOf(res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "upload_artifact", Arguments: map[string]any{"path": "dot.png"}})
	if err != nil || res.IsError {
		t.Fatalf("upload_artifact: %v %q", err, textOf(res))
	}
	want, _ := base64.StdEncoding.DecodeString(onePixelPNG)
	if img := imageOf(res); img == nil || img.MIMEType != "image/png" || !bytes.Equal(img.Data, want) {
		t.Errorf("upload_artifact of a PNG: image content %+v, want the PNG itself; text %q", img, textOf(res))
	}

	// The stdio bridge passes the image on, with the session's token.
	bridge := exec.Command(binary, "mcp", "--session", id)
	bridge.Env = append(os.Environ(), c.env(secret)...)
	bc, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-stdio", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: bridge}, nil)
	if err != nil {
		t.Fatalf("connect to outpost mcp with the session's token: %v", err)
	}
	res, err = bc.CallTool(ctx, &mcp.CallToolParams{Name: "upload_artifact", Arguments: map[string]any{"path": "dot.png", "name": "dot2.png"}})
	if err != nil || res.IsError {
		t.Fatalf("upload_artifact through the bridge: %v %q", err, textOf(res))
	}
	if img := imageOf(res); img == nil || !bytes.Equal(img.Data, want) {
		t.Errorf("upload_artifact through the bridge: image content %+v, want the PNG", img)
	}
	bc.Close()

	if _, err := exec.LookPath("chromium"); err == nil {
		page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `<!doctype html><title>Shot</title><h1 style="color:red">Seen from outside</h1>`)
		}))
		defer page.Close()
		// Chromium's first start can pass the remote's 30 s bound on a
		// machine busy with the rest of the suite; a slow start is not what
		// this test is about, so it is tried again (a new start is faster,
		// its files cached).
		for try := 1; ; try++ {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "browser_navigate", Arguments: map[string]any{"url": page.URL}})
			if err == nil && !res.IsError {
				break
			}
			if try == 3 || err != nil || !strings.Contains(textOf(res), "did not answer within") {
				t.Fatalf("browser_navigate: %v %q", err, textOf(res))
			}
			t.Logf("browser_navigate, try %d: %q; trying again", try, textOf(res))
		}
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "browser_screenshot", Arguments: map[string]any{"name": "page.png"}})
		if err != nil || res.IsError {
			t.Fatalf("browser_screenshot: %v %q", err, textOf(res))
		}
		img := imageOf(res)
		if img == nil || img.MIMEType != "image/png" {
			t.Fatalf("browser_screenshot: no PNG image content in %d contents; text %q", len(res.Content), textOf(res))
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(img.Data))
		if err != nil || format != "png" || cfg.Width < 100 || cfg.Height < 100 {
			t.Errorf("browser_screenshot image: %v %s %dx%d", err, format, cfg.Width, cfg.Height)
		}
	} else {
		t.Log("chromium is not installed: browser_screenshot not checked")
	}

	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "end_session", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	c.waitFinal(id, 30*time.Second)
	if code := c.api("GET", "/v1/sessions/"+id, secret, nil, nil); code != 401 {
		t.Errorf("the session's token after the session ended: %d, want 401", code)
	}
}
