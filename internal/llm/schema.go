package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
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

// rawObject returns args when they are a JSON object, and {} otherwise:
// for replaying a call whose arguments the model got wrong to an API that
// only takes objects.
func rawObject(args json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(args)
	if strings.HasPrefix(string(trimmed), "{") && json.Valid(trimmed) {
		return trimmed
	}
	return json.RawMessage(`{}`)
}
