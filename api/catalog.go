package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// ToolSpec describes a tool to a model (OpenAI or Anthropic function tools),
// an MCP client or a reader of the docs.
type ToolSpec struct {
	// Name is the tool's name, as in script steps, model tool calls and MCP.
	Name string `json:"name"`
	// Description says what the tool does, how paths are resolved and its
	// limits.
	Description string `json:"description"`
	// InputSchema is the JSON schema (type object, additionalProperties
	// false) of the tool's arguments, generated from the argument type the
	// remote decodes.
	InputSchema json.RawMessage `json:"inputSchema"`
}

// Tools describes every tool, in the order of ToolNames. The result is the
// caller's to change.
func Tools() []ToolSpec {
	specs := toolSpecs()
	out := make([]ToolSpec, len(specs))
	for i, s := range specs {
		s.InputSchema = slices.Clone(s.InputSchema)
		out[i] = s
	}
	return out
}

// toolSpecs generates the specs once. The schemas come from fixed Go types,
// so a failure is a programming error that the package's tests catch.
var toolSpecs = sync.OnceValue(func() []ToolSpec {
	specs := make([]ToolSpec, len(toolTable))
	for i, d := range toolTable {
		spec, err := d.spec()
		if err != nil {
			panic(err)
		}
		specs[i] = spec
	}
	return specs
})

// spec generates d's ToolSpec.
func (d toolDef) spec() (ToolSpec, error) {
	s, err := d.schema()
	if err != nil {
		return ToolSpec{}, fmt.Errorf("tool %s: %w", d.name, err)
	}
	if d.refine != nil {
		d.refine(s)
	}
	// Resolving checks that the schema is well formed.
	if _, err := s.Resolve(nil); err != nil {
		return ToolSpec{}, fmt.Errorf("tool %s: schema: %w", d.name, err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return ToolSpec{}, fmt.Errorf("tool %s: schema: %w", d.name, err)
	}
	return ToolSpec{Name: d.name, Description: d.description, InputSchema: b}, nil
}
