package web

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestStepWriter streams events as the API does, cut into writes at odd
// places, through stepWriter over a real HTTP connection: each call event
// comes after a step event holding its target, every API event arrives
// byte for byte, and an error answer passes untouched.
func TestStepWriter(t *testing.T) {
	t.Parallel()
	args := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	events := []api.Event{
		{Seq: 1, Type: api.EventStatus, Status: api.StatusRunning},
		{Seq: 2, Type: api.EventCall, CallSeq: 1, Tool: api.ToolExec, Args: args(api.ExecArgs{Argv: []string{"echo", "a b"}})},
		{Seq: 3, Type: api.EventOutput, CallSeq: 1, Text: `"type":"call" in output` + "\n\n"},
		{Seq: 4, Type: api.EventCall, CallSeq: 2, Tool: api.ToolBrowserConsole, Args: args(api.BrowserConsoleArgs{})},
		{Seq: 5, Type: api.EventCall, CallSeq: 3, Tool: api.ToolGitClone, Args: args(api.GitCloneArgs{URL: "/srv/<app>.git", Name: "app"})},
	}
	var stream []byte
	for _, ev := range events {
		stream = fmt.Appendf(stream, "id: %d\ndata: ", ev.Seq)
		var err error
		if stream, err = api.AppendEventJSON(stream, &ev); err != nil {
			t.Fatal(err)
		}
		stream = append(stream, "\n\n"...)
	}
	stream = append(stream, ": keepalive\n\n"...)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &stepWriter{ResponseWriter: w}
		if r.URL.Path == "/missing" {
			sw.Header().Set("Content-Type", "application/json")
			sw.WriteHeader(http.StatusNotFound)
			io.WriteString(sw, `{"error":{"code":"not_found","message":"No such session."}}`+"\n\n")
			return
		}
		sw.Header().Set("Content-Type", "text/event-stream")
		for rest := stream; len(rest) > 0; {
			n := min(len(rest), 7)
			if _, err := sw.Write(rest[:n]); err != nil {
				return
			}
			sw.Flush()
			rest = rest[n:]
		}
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type frame struct{ event, id, data string }
	var frames []frame
	var f frame
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			frames = append(frames, f)
			f = frame{}
		case strings.HasPrefix(line, "event: "):
			f.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			f.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			f.data = strings.TrimPrefix(line, "data: ")
		}
	}
	var got []string
	for _, f := range frames {
		if f.event == "step" {
			if f.id != "" {
				t.Errorf("step event with id %s; the page would resume after it", f.id)
			}
			got = append(got, "step "+f.data)
			continue
		}
		got = append(got, "id "+f.id)
	}
	want := []string{
		"id 1",
		`step {"call_seq":1,"target":"echo 'a b'"}`,
		"id 2",
		"id 3",
		"id 4", // browser_console has nothing to show
		`step {"call_seq":3,"target":"app ← /srv/\u003capp\u003e.git"}`,
		"id 5",
		"id ", // the keepalive
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("frames:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The API's own events arrive as it wrote them.
	var apiFrames strings.Builder
	for _, f := range frames {
		if f.event == "" && f.id != "" {
			fmt.Fprintf(&apiFrames, "id: %s\ndata: %s\n\n", f.id, f.data)
		}
	}
	if wantAPI := strings.TrimSuffix(string(stream), ": keepalive\n\n"); apiFrames.String() != wantAPI {
		t.Errorf("API events changed:\n%s\nwant:\n%s", apiFrames.String(), wantAPI)
	}

	resp, err = http.Get(srv.URL + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || string(body) != `{"error":{"code":"not_found","message":"No such session."}}`+"\n\n" {
		t.Errorf("error answer: %d %q", resp.StatusCode, body)
	}
}
