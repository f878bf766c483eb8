package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// emptySchema is the schema of a tool without arguments.
const emptySchema = `{"type":"object","properties":{}}`

// schemaObject decodes a tool's input schema into its top-level fields,
// keeping each value's JSON as it was. Empty means a tool without arguments.
func schemaObject(t Tool) (map[string]json.RawMessage, error) {
	raw := bytes.TrimSpace(t.InputSchema)
	if len(raw) == 0 {
		raw = []byte(emptySchema)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("tool %q: input schema is not a JSON object", t.Name)
	}
	if typ, ok := fields["type"]; ok && jsonString(typ) != "object" {
		return nil, fmt.Errorf("tool %q: input schema has type %s, want \"object\"", t.Name, typ)
	}
	return fields, nil
}

// invalidArgumentsKey is the one field of the object that stands in, for
// APIs that only take objects, for tool-call arguments that are not a JSON
// object (see [objectArguments]).
const invalidArgumentsKey = "_invalid_arguments"

// objectArguments returns a tool call's arguments as a JSON object, for
// replaying them to an API that only takes objects (Anthropic's
// tool_use.input): a JSON object as it is; none (empty or blank) as {};
// anything else — invalid JSON, or JSON that is not an object — as
// {"_invalid_arguments": "<the text exactly as the model sent it>"}, so the
// model sees again what it wrote, beside the tool error that answered it.
func objectArguments(args json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 {
		return json.RawMessage(`{}`)
	}
	if trimmed[0] == '{' && json.Valid(trimmed) {
		return trimmed
	}
	// Marshal turns bytes that are not UTF-8 into U+FFFD.
	b, _ := json.Marshal(map[string]string{invalidArgumentsKey: string(args)})
	return b
}
