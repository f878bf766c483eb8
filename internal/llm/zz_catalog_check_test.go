package llm

import (
	"encoding/json"
	"testing"

	"github.com/outpost-sh/outpost/internal/api"
)

func TestZZCatalog(t *testing.T) {
	var tools []Tool
	for _, s := range api.Tools() {
		tools = append(tools, Tool{Name: s.Name, Description: s.Description, InputSchema: s.InputSchema})
	}
	req := Request{Model: "m", Tools: tools}
	op, err := (&openAIBackend{}).params(req)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := anthropicParams(req)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(op.Tools[0])
	b, _ := json.Marshal(ap.Tools[0])
	t.Logf("%s\n%s\n%s", tools[0].InputSchema, a, b)
}
