package web

import (
	"encoding/json"
	"testing"

	"github.com/outpost-sh/outpost/internal/api"
)

// TestWithoutMedia: events of a session whose artifacts were pruned show
// no inline media, and the events passed in are left as they were.
func TestWithoutMedia(t *testing.T) {
	in := []api.Event{{SessionID: "ses_1", Seq: 3, Type: api.EventResult, Tool: api.ToolUploadArtifact,
		Value: json.RawMessage(`{"name":"shot.png","content_type":"image/png"}`)}}
	if mediaOf(in[0].SessionID, in[0].Tool, in[0].Value) == nil {
		t.Fatal("fixture shows no media")
	}
	out := withoutMedia(in)
	if len(out) != 1 || out[0].Seq != 3 || string(out[0].Value) != string(in[0].Value) {
		t.Fatalf("withoutMedia changed the event: %+v", out)
	}
	if m := mediaOf(out[0].SessionID, out[0].Tool, out[0].Value); m != nil {
		t.Errorf("pruned event shows %+v", m)
	}
	if in[0].SessionID != "ses_1" {
		t.Error("withoutMedia changed its input")
	}
}
