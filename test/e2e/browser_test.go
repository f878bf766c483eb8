//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestBrowserScreenshotArtifact drives a real Chromium from a script
// session: a page on loopback is opened, typed into and clicked, its text
// read, and a screenshot and a short recording come back as artifacts.
func TestBrowserScreenshotArtifact(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skip("chromium is not installed (apt-get install chromium); .ci/run installs it")
	}
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed (apt-get install ffmpeg); .ci/run installs it")
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `<!doctype html><title>Greeter</title><input id="name"><button id="go" onclick="document.getElementById('out').textContent='Hello, '+document.getElementById('name').value">Go</button><p id="out"></p>`)
	}))
	defer page.Close()
	c := startCluster(t)
	token := setupOutpost(t, c, "browsers")
	startWorker(t, c, "browsers", token)
	step := func(tool string, args any) api.Step {
		b, _ := json.Marshal(args)
		return api.Step{Tool: tool, Args: b}
	}
	id := createSession(t, c, api.CreateSessionRequest{Outpost: "browsers", Title: "browse",
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			step("browser_navigate", map[string]any{"url": page.URL}),
			step("record_start", map[string]any{"name": "demo.mp4"}),
			step("browser_type", map[string]any{"selector": "#name", "text": "Ada"}),
			step("browser_click", map[string]any{"selector": "#go"}),
			step("browser_text", map[string]any{"selector": "#out"}),
			step("browser_screenshot", map[string]any{"name": "page.png"}),
			step("record_stop", map[string]any{}),
		}}})
	s := c.waitFinal(id, 90*time.Second)
	if s.Status.Status != api.StatusExit || s.Status.StatusDetail != api.DetailFinished {
		t.Fatalf("session: %+v", s.Status)
	}
	if caps := s.Status.Capabilities; caps == nil || !strings.Contains(caps.ChromeVersion, "Chrom") {
		t.Errorf("capabilities lack the Chrome version: %+v", caps)
	}
	text := ""
	for _, ev := range c.events(id) {
		if ev.Type == api.EventResult && ev.Tool == "browser_text" {
			text = string(ev.Value)
		}
	}
	if !strings.Contains(text, "Hello, Ada") {
		t.Errorf("browser_text result %q", text)
	}
	var list api.ArtifactList
	if code := c.api("GET", "/v1/sessions/"+id+"/artifacts", c.admin, nil, &list); code != 200 {
		t.Fatalf("artifacts: %d", code)
	}
	names := map[string]bool{}
	for _, a := range list.Items {
		names[a.Name] = true
	}
	if !names["page.png"] || !names["demo.mp4"] {
		t.Fatalf("artifacts %+v, want page.png and demo.mp4", list.Items)
	}
	req, _ := http.NewRequest("GET", c.url+"/v1/sessions/"+id+"/artifacts/page.png", nil)
	req.Header.Set("Authorization", "Bearer "+c.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	cfg, err := png.DecodeConfig(bytes.NewReader(body))
	if err != nil || cfg.Width < 100 || cfg.Height < 100 {
		t.Fatalf("screenshot artifact: %v %+v", err, cfg)
	}
}
