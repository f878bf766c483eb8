package api

import (
	"bytes"
	"strings"
	"testing"
)

// Examples for the catalogue tests in catalog_test.go, for upload_artifact.
func init() {
	examples[ToolUploadArtifact] = []string{`{"path":"out/report.pdf","name":"report-1.pdf"}`, `{"path":"/tmp/x.tar.gz"}`}
	invalid[ToolUploadArtifact] = []string{`{}`, `{"path":""}`, `{"path":"a","name":"../x"}`, `{"path":"a","name":"a/b"}`,
		`{"path":"a","name":".hidden"}`, `{"path":"a","name":"` + strings.Repeat("x", 129) + `"}`}
}

func TestValidateArtifactName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "report.pdf", "A_b-c.1", strings.Repeat("x", 128)} {
		if err := ValidateArtifactName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", ".meta", "-x", "a b", "a\\b", strings.Repeat("x", 129)} {
		if err := ValidateArtifactName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestArtifactChunkRoundTrip(t *testing.T) {
	t.Parallel()
	b := ArtifactChunk{ID: 7, Data: []byte("hello")}.AppendBinary(nil)
	if !IsArtifactChunk(b) {
		t.Fatal("not recognised as a chunk")
	}
	c, err := ParseArtifactChunk(b)
	if err != nil || c.ID != 7 || !bytes.Equal(c.Data, []byte("hello")) {
		t.Fatalf("parse: %+v, %v", c, err)
	}
	if _, err := ParseArtifactChunk([]byte{'a', 1}); err == nil {
		t.Fatal("short chunk accepted")
	}
	if IsArtifactChunk(OutputFrame{Seq: 1, Stream: StreamStdout, Data: []byte("x")}.AppendBinary(nil)) {
		t.Fatal("output frame taken for a chunk")
	}
}
