// Package tooldoc renders the tool catalogue, api.Tools, as Markdown. It is
// what docs/tools.md is generated with (go generate ./internal/tooldoc).
package tooldoc

//go:generate go run ./gentools -o ../../docs/tools.md

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/outpost-sh/outpost/api"
)

// Markdown renders tools as a Markdown document: per tool its name,
// description, a table of its arguments and its JSON schema.
func Markdown(tools []api.ToolSpec) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Tools\n\n")
	b.WriteString("<!-- Generated from api.Tools() by `go generate ./internal/tooldoc`; do not edit. -->\n\n")
	b.WriteString("These are the tools of a session: all but one run on the outpost's remote; " +
		"`network_access_request` is answered by the control plane (a person grants or denies it). Script steps (`agent.steps[].tool` and `.args`), " +
		"model tool calls (OpenAI and Anthropic function tools) and MCP tool listings all use these names and " +
		"arguments. The schemas are generated from the argument types in `api/tools.go`, the same Go types " +
		"the remote decodes, so there is one definition per tool. The remote rejects arguments it does not know " +
		"(`additionalProperties: false`). Relative paths are resolved against the session's workspace.\n\n")
	for _, t := range tools {
		fmt.Fprintf(&b, "- [`%s`](#%s)\n", t.Name, t.Name)
	}
	for _, t := range tools {
		if err := writeTool(&b, t); err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
	}
	return b.Bytes(), nil
}

func writeTool(b *bytes.Buffer, t api.ToolSpec) error {
	var s jsonschema.Schema
	if err := json.Unmarshal(t.InputSchema, &s); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	fmt.Fprintf(b, "\n## %s\n\n%s\n\n", t.Name, t.Description)
	if api.IsServerTool(t.Name) {
		b.WriteString("The control plane answers this tool itself; the call never reaches the remote. " +
			"A person answers it with `POST /v1/sessions/{id}/network-requests/{request_id}/grant` or `/deny`, " +
			"`outpost sessions network grant|deny`, or the session's page in the web UI (see [api.md](api.md)). " +
			"The result is `{\"request_id\", \"granted\", \"scope\", \"domains\", \"reason\"}`; a denial is a result, not an error.\n\n")
	}
	if len(s.Properties) == 0 {
		b.WriteString("No arguments.\n")
	} else {
		b.WriteString("| Argument | Type | Required | Description |\n|---|---|---|---|\n")
		for _, name := range propertyNames(t.InputSchema, &s) {
			p := s.Properties[name]
			req := "no"
			if slices.Contains(s.Required, name) {
				req = "yes"
			}
			fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", name, cell(typeOf(p)), req, cell(p.Description))
		}
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, t.InputSchema, "", "  "); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	fmt.Fprintf(b, "\n<details>\n<summary>JSON schema</summary>\n\n```json\n%s\n```\n\n</details>\n", pretty.Bytes())
	return nil
}

// propertyNames lists the schema's properties in the order the JSON has them
// (the argument struct's field order), or sorted when that order cannot be
// read.
func propertyNames(raw json.RawMessage, s *jsonschema.Schema) []string {
	var top struct {
		Properties json.RawMessage `json:"properties"`
	}
	var names []string
	if err := json.Unmarshal(raw, &top); err == nil && len(top.Properties) > 0 {
		dec := json.NewDecoder(bytes.NewReader(top.Properties))
		if _, err := dec.Token(); err == nil { // {
			for dec.More() {
				key, err := dec.Token()
				name, ok := key.(string)
				var value json.RawMessage
				if err != nil || !ok || dec.Decode(&value) != nil {
					break
				}
				names = append(names, name)
			}
		}
	}
	if len(names) != len(s.Properties) {
		names = slices.Sorted(maps.Keys(s.Properties))
	}
	return names
}

// typeOf describes a property's type and constraints in a few words.
func typeOf(s *jsonschema.Schema) string {
	if s == nil {
		return "any"
	}
	t := s.Type
	if t == "" && len(s.Types) > 0 {
		t = strings.Join(s.Types, " or ")
	}
	if t == "" {
		t = "any"
	}
	var parts []string
	switch {
	case t == "array" && s.Items != nil:
		t = "array of " + typeOf(s.Items)
	case t == "object" && s.AdditionalProperties != nil && s.AdditionalProperties.Type != "":
		t = "object with " + typeOf(s.AdditionalProperties) + " values"
	}
	if s.MinLength != nil && *s.MinLength > 0 {
		parts = append(parts, "non-empty")
	}
	if s.MinItems != nil && *s.MinItems > 0 {
		parts = append(parts, "at least "+strconv.Itoa(*s.MinItems)+" item")
		if *s.MinItems > 1 {
			parts[len(parts)-1] += "s"
		}
	}
	if s.Minimum != nil {
		parts = append(parts, "≥ "+strconv.FormatFloat(*s.Minimum, 'f', -1, 64))
	}
	if s.Pattern != "" {
		parts = append(parts, "matching `"+s.Pattern+"`")
	}
	if len(parts) > 0 {
		t += ", " + strings.Join(parts, ", ")
	}
	return t
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
