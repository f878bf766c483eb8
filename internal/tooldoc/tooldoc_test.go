package tooldoc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestMarkdown(t *testing.T) {
	spec := api.ToolSpec{
		Name:        "demo",
		Description: "Does a demo.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"z":{"type":"string","description":"a | b","minLength":1},` +
			`"a":{"type":"array","items":{"type":"string"},"description":"list"},` +
			`"m":{"type":"object","additionalProperties":{"type":"string"},"description":"map"}},"required":["z"],"additionalProperties":false}`),
	}
	b, err := Markdown([]api.ToolSpec{spec})
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, want := range []string{
		"MCP", "## demo\n\nDoes a demo.\n",
		"| `z` | string, non-empty | yes | a \\| b |\n| `a` | array of string | no | list |\n| `m` | object with string values | no | map |\n",
		"<details>\n<summary>JSON schema</summary>\n\n```json\n{\n  \"type\": \"object\",",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q:\n%s", want, doc)
		}
	}
	if _, err := Markdown([]api.ToolSpec{{Name: "bad", InputSchema: json.RawMessage(`[`)}}); err == nil {
		t.Error("Markdown took a broken schema")
	}
}
