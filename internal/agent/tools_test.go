package agent

import (
	"slices"
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
