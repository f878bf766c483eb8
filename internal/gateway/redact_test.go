package gateway

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/redact"
)

// TestReportRedactionKeepsChecksums: a secret short enough to occur in a
// snapshot's checksum is redacted from the report's text, never from the
// checksum the server compares with the upload.
func TestReportRedactionKeepsChecksums(t *testing.T) {
	t.Parallel()
	r := NewOutputRedactor(redact.NewSet(map[string]string{"S": "ab"}))
	f := api.Frame{Type: api.FrameSuspended, Snapshot: &api.SnapshotInfo{SHA256: "00ab11", Error: "failed: ab"}}
	r.Report(&f)
	if f.Type != api.FrameSuspended || f.Snapshot.SHA256 != "00ab11" || f.Snapshot.Error != "failed: [REDACTED:S]" {
		t.Errorf("redacted report %+v %+v", f, *f.Snapshot)
	}
}
