package tooldoc_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/tooldoc"
)

// TestToolsDocUpToDate fails when docs/tools.md is not what api.Tools()
// renders to.
func TestToolsDocUpToDate(t *testing.T) {
	want, err := tooldoc.Markdown(api.Tools())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/tools.md")
	if err != nil {
		t.Fatalf("docs/tools.md: %v; run go generate ./internal/tooldoc", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/tools.md is out of date: run go generate ./internal/tooldoc")
	}
}
