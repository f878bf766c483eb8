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
	ev, images, display := splitImages(api.Event{Type: api.EventResult, Tool: api.ToolComputer, OK: &ok, Value: value})
	if len(images) != 1 || images[0].Data != "iVBORw0K" || images[0].MediaType != "image/png" {
		t.Fatalf("images = %+v", images)
	}
	if display != (api.DesktopSize{Width: 1280, Height: 800}) {
		t.Errorf("display = %+v", display)
	}
	if strings.Contains(string(ev.Value), "iVBORw0K") || !strings.Contains(string(ev.Value), `"width":1280`) {
		t.Errorf("text value = %s, want the sizes without the base64", ev.Value)
	}
	for _, e := range []api.Event{
		{Type: api.EventResult, Tool: api.ToolExec, Value: value},
		{Type: api.EventResult, Tool: api.ToolComputer, Value: json.RawMessage(`{"coordinate":[1,2],"display_width":10,"display_height":10}`)},
		{Type: api.EventResult, Tool: api.ToolComputer},
	} {
		if got, images, _ := splitImages(e); images != nil || string(got.Value) != string(e.Value) {
			t.Errorf("%+v: changed to %s with %d images", e, got.Value, len(images))
		}
	}
}

// TestPruneImages: a request keeps the newest keepImages images; older
// ones become a line in their tool message, and the conversation's own
// messages keep theirs.
func TestPruneImages(t *testing.T) {
	t.Parallel()
	img := func(d string) []llm.Image { return []llm.Image{{MediaType: "image/png", Data: d}} }
	c := newConversation(2000)
	c.msgs = []llm.Message{
		{Role: llm.RoleUser, Text: "go"},
		{Role: llm.RoleTool, ToolCallID: "1", Text: "r1", Images: img("one")},
		{Role: llm.RoleTool, ToolCallID: "2", Text: "r2", Images: []llm.Image{{Data: "two-a"}, {Data: "two-b"}}},
		{Role: llm.RoleTool, ToolCallID: "3", Text: "r3"},
		{Role: llm.RoleTool, ToolCallID: "4", Text: "r4", Images: img("four")},
		{Role: llm.RoleTool, ToolCallID: "5", Text: "r5", Images: img("five")},
	}
	req := c.request()
	var kept []string
	for _, m := range req {
		for _, im := range m.Images {
			kept = append(kept, im.Data)
		}
	}
	if !slices.Equal(kept, []string{"two-b", "four", "five"}) {
		t.Errorf("kept images %v, want the newest three", kept)
	}
	if req[1].Images != nil || req[1].Text != "r1\n"+imageLeftOut {
		t.Errorf("oldest message %+v", req[1])
	}
	if req[2].Text != "r2\n"+imageLeftOut || len(req[2].Images) != 1 {
		t.Errorf("half-kept message %+v", req[2])
	}
	if req[3].Text != "r3" || req[4].Text != "r4" {
		t.Errorf("messages with kept images changed: %+v %+v", req[3], req[4])
	}
	if len(c.msgs[1].Images) != 1 || len(c.msgs[2].Images) != 2 || c.msgs[1].Text != "r1" {
		t.Errorf("the conversation itself lost images: %+v %+v", c.msgs[1], c.msgs[2])
	}
	if got := pruneImages(append([]llm.Message(nil), c.msgs...), 10); len(got[1].Images) != 1 || got[1].Text != "r1" {
		t.Errorf("under the bound: %+v", got[1])
	}
}

// TestComputerDisplay: the model is told the screenshots' size: scaled
// from the session's desktop (or the default) until a computer result
// says the display's real size.
func TestComputerDisplay(t *testing.T) {
	t.Parallel()
	if api.ToolComputer != llm.ComputerToolName {
		t.Fatalf("the computer tool is %q, llm's native one %q", api.ToolComputer, llm.ComputerToolName)
	}
	c := newConversation(2000)
	if d := c.computerDisplay(nil); *d != (llm.ComputerDisplay{Width: 1280, Height: 800}) {
		t.Errorf("default: %+v", d)
	}
	// 2560×1600 is past the model's limits: scaled as the remote does.
	w, h := api.ComputerScreenshotSize(2560, 1600)
	if w >= 2560 || w*h > api.ComputerMaxPixels {
		t.Fatalf("ComputerScreenshotSize(2560, 1600) = %d×%d", w, h)
	}
	if d := c.computerDisplay(&api.DesktopSize{Width: 2560, Height: 1600}); *d != (llm.ComputerDisplay{Width: w, Height: h}) {
		t.Errorf("spec 2560×1600: %+v, want %d×%d", d, w, h)
	}
	ok := true
	c.pending[1] = "t1"
	c.apply(api.Event{Seq: 1, Type: api.EventResult, CallSeq: 1, Tool: api.ToolComputer, OK: &ok,
		Value: json.RawMessage(`{"coordinate":[1,2],"display_width":1024,"display_height":768}`)})
	if d := c.computerDisplay(&api.DesktopSize{Width: 2560, Height: 1600}); *d != (llm.ComputerDisplay{Width: 1024, Height: 768}) {
		t.Errorf("after a result from a 1024×768 display: %+v", d)
	}
}
