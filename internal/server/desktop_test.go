package server

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSessionDesktopSize: spec.desktop is kept as given; sizes out of
// bounds are refused with a message that names the field, and create
// nothing.
func TestSessionDesktopSize(t *testing.T) {
	t.Parallel()
	ts := startServer(t, Options{})
	ts.outpost("d")
	var s api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"d","desktop":{"width":1920,"height":1080},"agent":{"kind":"script"}}`, &s)
	if d := s.Spec.Desktop; d == nil || d.Width != 1920 || d.Height != 1080 {
		t.Fatalf("created spec.desktop = %+v", s.Spec.Desktop)
	}
	var got api.Session
	ts.mustDo(200, "GET", "/v1/sessions/"+s.Metadata.SessionID, ts.admin, nil, &got)
	if d := got.Spec.Desktop; d == nil || *d != (api.DesktopSize{Width: 1920, Height: 1080}) {
		t.Errorf("read spec.desktop = %+v", got.Spec.Desktop)
	}
	var plain api.Session
	ts.mustDo(201, "POST", "/v1/sessions", ts.admin, `{"outpost":"d","agent":{"kind":"script"}}`, &plain)
	if plain.Spec.Desktop != nil {
		t.Errorf("a session without desktop has spec.desktop %+v", plain.Spec.Desktop)
	}

	var before api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &before)
	for _, desk := range []string{
		`{"width":100,"height":800}`, `{"width":1280,"height":5000}`, `{"width":-1,"height":800}`,
		`{"width":1280}`, `{}`, `{"width":"big","height":800}`,
	} {
		body := `{"outpost":"d","desktop":` + desk + `,"agent":{"kind":"script"}}`
		req, err := http.NewRequest("POST", ts.url+"/v1/sessions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+ts.admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.ErrorResponse
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 400 || !strings.Contains(e.Error.Message, "desktop") {
			t.Errorf("desktop %s: %d %q (%v), want 400 naming the field", desk, resp.StatusCode, e.Error.Message, err)
		}
	}
	var after api.SessionList
	ts.mustDo(200, "GET", "/v1/sessions", ts.admin, nil, &after)
	if after.Total != before.Total {
		t.Errorf("refused requests created sessions: %d, then %d", before.Total, after.Total)
	}
}

func TestComputerImageForMCP(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG fake")
	value, _ := json.Marshal(api.ComputerResult{Image: &api.ComputerImage{MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(png)}, Width: 2, Height: 1})
	img := computerImage(api.ToolComputer, api.ToolResult{OK: true, Value: value})
	if img == nil || string(img.Data) != string(png) || img.MIMEType != "image/png" {
		t.Fatalf("image content = %+v", img)
	}
	for _, res := range []struct {
		tool string
		r    api.ToolResult
	}{
		{api.ToolExec, api.ToolResult{OK: true, Value: value}},
		{api.ToolComputer, api.ToolResult{OK: false, Value: value}},
		{api.ToolComputer, api.ToolResult{OK: true, Value: json.RawMessage(`{"coordinate":[1,2]}`)}},
		{api.ToolComputer, api.ToolResult{OK: true, Value: json.RawMessage(`{"image":{"media_type":"image/png","data":"!!"}}`)}},
	} {
		if img := computerImage(res.tool, res.r); img != nil {
			t.Errorf("%s %+v: image %+v, want none", res.tool, res.r, img)
		}
	}
}
