package web

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestScreenshotShowsOnceFromItsURL: a computer result's screenshot shows
// as a thumbnail from the image route, and its base64 is nowhere in what
// the page renders (neither the value nor the raw JSON); other fields of
// the raw JSON stay.
func TestScreenshotShowsOnceFromItsURL(t *testing.T) {
	t.Parallel()
	data := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x89PNG-not-really", 100)))
	f := &fixture{now: 1_700_000_000_000}
	f.add(0, api.Event{Type: api.EventCall, CallSeq: 1, Tool: api.ToolComputer, Args: args(api.ComputerArgs{Action: api.ComputerScreenshot})}).
		add(80, api.Event{Type: api.EventResult, CallSeq: 1, Tool: api.ToolComputer, OK: ptr(true),
			Value: args(api.ComputerResult{Image: &api.ComputerImage{MediaType: "image/png", Data: data}, Width: 800, Height: 600, DisplayWidth: 800, DisplayHeight: 600})}).
		add(5, api.Event{Type: api.EventDesktop, Action: api.DesktopTakeControl, Actor: "tok_1", Reason: "Token tok_1 took control of the desktop."})
	items := buildTranscript(f.evs, transcriptOptions{NoMedia: true})
	if len(items) != 2 || items[0].Step == nil || items[1].Event == nil {
		t.Fatalf("items = %+v, want a step and an event", items)
	}
	s := items[0].Step
	if s.Media == nil || !s.Media.Shot || !s.Media.Image || s.Media.URL != "/ui/sessions/ses_1/events/2/image" {
		t.Fatalf("media = %+v, want the screenshot from the event's image route (artifacts pruned or not)", s.Media)
	}
	if s.Value != "" {
		t.Errorf("the value shows beside the image: %q", s.Value)
	}
	raw := s.Raw[1].JSON
	if strings.Contains(raw, data) || !strings.Contains(raw, elidedImage) || !strings.Contains(raw, `"display_width":800`) {
		t.Errorf("raw JSON = %s, want the image's data left out and the rest kept", raw)
	}
	if !strings.Contains(string(f.evs[1].Value), data) {
		t.Error("leaving the image out of the page changed the event itself")
	}
}

// TestShotOfIgnoresOthers: only a computer result with image data has a
// screenshot.
func TestShotOfIgnoresOthers(t *testing.T) {
	t.Parallel()
	for _, ev := range []api.Event{
		{Type: api.EventResult, Tool: api.ToolExec, Value: args(map[string]any{"image": map[string]string{"data": "eA=="}})},
		{Type: api.EventCall, Tool: api.ToolComputer, Value: args(map[string]any{"image": map[string]string{"data": "eA=="}})},
		{Type: api.EventResult, Tool: api.ToolComputer, Value: args(api.ComputerResult{Coordinate: []int{1, 2}})},
		{Type: api.EventResult, Tool: api.ToolComputer, Value: []byte(`"not an object"`)},
	} {
		if shotOf(&ev) != nil {
			t.Errorf("shotOf(%s %s %s) found a screenshot", ev.Type, ev.Tool, ev.Value)
		}
	}
}
