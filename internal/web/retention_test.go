package web

import (
	"encoding/json"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestPrunedSessionShowsNoMedia: a session whose artifacts were pruned
// shows no inline media, and its events are left as they were.
func TestPrunedSessionShowsNoMedia(t *testing.T) {
	ok := true
	in := []api.Event{{SessionID: "ses_1", Seq: 3, Type: api.EventResult, CallSeq: 1, Tool: api.ToolUploadArtifact, OK: &ok,
		Value: json.RawMessage(`{"name":"shot.png","content_type":"image/png"}`)}}
	if items := buildTranscript(in, transcriptOptions{Final: true}); items[0].Step.Media == nil {
		t.Fatal("fixture shows no media")
	}
	items := buildTranscript(in, transcriptOptions{Final: true, NoMedia: true})
	if m := items[0].Step.Media; m != nil {
		t.Errorf("pruned event shows %+v", m)
	}
	if in[0].SessionID != "ses_1" {
		t.Error("buildTranscript changed its input")
	}
}
