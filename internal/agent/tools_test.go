package agent

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/llm"
)

// TestComputerToolOnlyWithADesktop: models are offered the computer tool
// when the session's machine has a desktop, and only then.
func TestComputerToolOnlyWithADesktop(t *testing.T) {
	t.Parallel()
	has := func(tools []llm.Tool) bool {
		return slices.ContainsFunc(tools, func(t llm.Tool) bool { return t.Name == api.ToolComputer })
	}
	if has(modelTools(nil)) {
		t.Error("offered without capabilities")
	}
	if has(modelTools(&api.Capabilities{OS: "linux"})) {
		t.Error("offered without a desktop")
	}
	with := modelTools(&api.Capabilities{OS: "linux", Desktop: true})
	if !has(with) {
		t.Error("not offered with a desktop")
	}
	if len(with) != len(modelTools(nil))+1 {
		t.Errorf("%d tools with a desktop, %d without: only computer should differ", len(with), len(modelTools(nil)))
	}
}

func TestSplitImages(t *testing.T) {
	t.Parallel()
	ok := true
	value := json.RawMessage(`{"image":{"media_type":"image/png","data":"iVBORw0K"},"width":1280,"height":800,"display_width":1280,"display_height":800}`)
	ev, images := splitImages(api.Event{Type: api.EventResult, Tool: api.ToolComputer, OK: &ok, Value: value})
	if len(images) != 1 || images[0].Data != "iVBORw0K" || images[0].MediaType != "image/png" {
		t.Fatalf("images = %+v", images)
	}
	if strings.Contains(string(ev.Value), "iVBORw0K") || !strings.Contains(string(ev.Value), `"width":1280`) {
		t.Errorf("text value = %s, want the sizes without the base64", ev.Value)
	}
	for _, e := range []api.Event{
		{Type: api.EventResult, Tool: api.ToolExec, Value: value},
		{Type: api.EventResult, Tool: api.ToolComputer, Value: json.RawMessage(`{"coordinate":[1,2],"display_width":10,"display_height":10}`)},
		{Type: api.EventResult, Tool: api.ToolComputer},
	} {
		if got, images := splitImages(e); images != nil || string(got.Value) != string(e.Value) {
			t.Errorf("%+v: changed to %s with %d images", e, got.Value, len(images))
		}
	}
}
