package helm

import (
	"encoding/json"
	"path"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestSchemaKeysAreInValuesYAML: every key a chart's values.schema.json
// admits in a closed object is in its values.yaml, where it is described;
// the schema cannot accept a setting the chart does not document. (The
// other way round — values.yaml holding only keys the schema admits — is
// checked by every render: the defaults are validated too.)
func TestSchemaKeysAreInValuesYAML(t *testing.T) {
	t.Parallel()
	for _, chart := range []string{Operator, Server} {
		raw, err := Charts.ReadFile(path.Join(chart, "values.schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		var schema map[string]any
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatalf("%s: %v", chart, err)
		}
		raw, err = Charts.ReadFile(path.Join(chart, "values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var vals map[string]any
		if err := yaml.Unmarshal(raw, &vals); err != nil {
			t.Fatalf("%s: %v", chart, err)
		}
		defs, _ := schema["definitions"].(map[string]any)
		var walk func(where string, node map[string]any, v map[string]any)
		walk = func(where string, node map[string]any, v map[string]any) {
			if ref, ok := node["$ref"].(string); ok {
				node, _ = defs[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
			}
			props, _ := node["properties"].(map[string]any)
			if node["additionalProperties"] != false {
				return
			}
			keys := make([]string, 0, len(props))
			for k := range props {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				if where == "" && k == "global" {
					continue
				}
				child, ok := v[k]
				if !ok {
					t.Errorf("%s: the schema admits %s%s, which values.yaml does not have", chart, where, k)
					continue
				}
				if m, ok := child.(map[string]any); ok {
					walk(where+k+".", props[k].(map[string]any), m)
				}
			}
		}
		walk("", schema, vals)
	}
}
