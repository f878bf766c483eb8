package api

import (
	"encoding/json"
	"testing"
)

// The computer tool's examples for the catalogue tests.
func init() {
	examples[ToolComputer] = []string{
		`{"action":"screenshot"}`,
		`{"action":"left_click","coordinate":[10,20],"text":"shift"}`,
		`{"action":"left_click_drag","start_coordinate":[1,2],"coordinate":[30,40]}`,
		`{"action":"double_click","coordinate":[10,20],"key":"ctrl"}`,
		`{"action":"left_mouse_down","coordinate":[10,20]}`,
		`{"action":"scroll","coordinate":[5,5],"scroll_direction":"down","scroll_amount":3}`,
		`{"action":"hold_key","text":"shift","duration":1.5}`,
		`{"action":"zoom","region":[0,0,100,50]}`,
	}
	invalid[ToolComputer] = []string{
		`{}`, `{"action":"dance"}`, `{"action":"left_click","coordinate":[1]}`,
		`{"action":"left_click","coordinate":[-1,2]}`, `{"action":"zoom","region":[0,0,1]}`,
		`{"action":"scroll","scroll_direction":"sideways"}`, `{"action":"wait","duration":1000}`,
	}
}

func TestComputerActionsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range ComputerActions {
		if seen[a] {
			t.Errorf("action %q listed twice", a)
		}
		seen[a] = true
	}
	if len(seen) != 17 {
		t.Errorf("%d actions, want Anthropic's 17", len(seen))
	}
}

func TestComputerResultJSON(t *testing.T) {
	b, err := json.Marshal(ComputerResult{Image: &ComputerImage{MediaType: "image/png", Data: "AA=="}, Width: 3, Height: 2, DisplayWidth: 3, DisplayHeight: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"image":{"media_type":"image/png","data":"AA=="},"width":3,"height":2,"display_width":3,"display_height":2}`
	if string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}
