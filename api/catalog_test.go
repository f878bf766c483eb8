package api

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

func TestToolsCoverToolNames(t *testing.T) {
	names := ToolNames()
	// The first tools keep their places; others follow, each once.
	want := []string{ToolExec, ToolReadFile, ToolWriteFile, ToolEditFile, ToolListDir, ToolGitClone}
	if len(names) < len(want) || !slices.Equal(names[:len(want)], want) {
		t.Fatalf("ToolNames() = %v, want it to start with %v", names, want)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("ToolNames() lists %q twice", n)
		}
		seen[n] = true
	}
	var got []string
	for _, s := range Tools() {
		got = append(got, s.Name)
		if strings.TrimSpace(s.Description) == "" {
			t.Errorf("%s: empty description", s.Name)
		}
	}
	if !slices.Equal(got, names) {
		t.Fatalf("Tools() names = %v, want ToolNames() %v", got, names)
	}
	for _, n := range names {
		a, ok := NewToolArgs(n)
		if !ok || a == nil || reflect.TypeOf(a).Kind() != reflect.Pointer {
			t.Errorf("NewToolArgs(%q) = %v, %v; want a pointer", n, a, ok)
		}
	}
	if _, ok := NewToolArgs("rm_rf"); ok {
		t.Error("NewToolArgs(rm_rf) found a tool")
	}
}

func TestToolsReturnsCopies(t *testing.T) {
	a := Tools()
	a[0].Name = "changed"
	a[0].InputSchema[0] = 'X'
	b := Tools()
	if b[0].Name != ToolExec || b[0].InputSchema[0] != '{' {
		t.Fatal("changing Tools()'s result changed the catalogue")
	}
}

// schemaOf returns tool's schema as generic JSON and resolved for validation.
func schemaOf(t *testing.T, spec ToolSpec) (map[string]any, *jsonschema.Resolved) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(spec.InputSchema, &m); err != nil {
		t.Fatalf("%s: schema is not a JSON object: %v", spec.Name, err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(spec.InputSchema, &s); err != nil {
		t.Fatalf("%s: schema does not parse: %v", spec.Name, err)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("%s: schema does not resolve: %v", spec.Name, err)
	}
	return m, r
}

func TestToolSchemasAreClosedObjects(t *testing.T) {
	for _, spec := range Tools() {
		m, _ := schemaOf(t, spec)
		if m["type"] != "object" {
			t.Errorf("%s: type = %v, want object", spec.Name, m["type"])
		}
		if ap, ok := m["additionalProperties"]; !ok || ap != false {
			t.Errorf("%s: additionalProperties = %v, want false", spec.Name, ap)
		}
		for _, key := range []string{"oneOf", "anyOf", "allOf", "not", "enum"} {
			// Anthropic and OpenAI refuse these at the top level of a tool's input schema.
			if _, ok := m[key]; ok {
				t.Errorf("%s: top-level %s", spec.Name, key)
			}
		}
	}
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	name      string
	omitempty bool
}

// jsonFields lists the JSON fields of struct type t.
func jsonFields(t reflect.Type) map[string]jsonField {
	fields := map[string]jsonField{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || f.Anonymous {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		fields[name] = jsonField{name: name, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")}
	}
	return fields
}

// TestSchemaMatchesStruct keeps each schema and its argument type from
// drifting: same property names, required exactly the fields without
// omitempty, and a description for every property.
func TestSchemaMatchesStruct(t *testing.T) {
	for _, spec := range Tools() {
		args, _ := NewToolArgs(spec.Name)
		typ := reflect.TypeOf(args).Elem()
		fields := jsonFields(typ)
		m, _ := schemaOf(t, spec)
		props, _ := m["properties"].(map[string]any)
		if got, want := slices.Sorted(maps.Keys(props)), slices.Sorted(maps.Keys(fields)); !slices.Equal(got, want) {
			t.Errorf("%s: schema properties %v, %s JSON fields %v", spec.Name, got, typ, want)
		}
		var required []string
		for _, r := range anySlice(m["required"]) {
			required = append(required, r.(string))
		}
		var wantRequired []string
		for name, f := range fields {
			if !f.omitempty {
				wantRequired = append(wantRequired, name)
			}
		}
		slices.Sort(required)
		slices.Sort(wantRequired)
		if !slices.Equal(required, wantRequired) {
			t.Errorf("%s: required %v, want the fields without omitempty %v", spec.Name, required, wantRequired)
		}
		for name, p := range props {
			if d, _ := p.(map[string]any)["description"].(string); strings.TrimSpace(d) == "" {
				t.Errorf("%s.%s: no description (add a jsonschema tag to the field)", spec.Name, name)
			}
		}
	}
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// decodeStrict decodes raw into a new argument value for tool the way the
// remote and the control plane do.
func decodeStrict(tool string, raw []byte) error {
	args, _ := NewToolArgs(tool)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(args)
}

// validate checks raw against the tool's schema.
func validate(t *testing.T, r *jsonschema.Resolved, raw string) error {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("bad example %s: %v", raw, err)
	}
	return r.Validate(v)
}

// examples are, per tool, arguments valid per the schema; together they set
// every property.
var examples = map[string][]string{
	ToolExec: {
		`{"command":"make test","cwd":"repos/demo","env":{"CI":"1"},"timeout_s":60,"stdin":"y\n"}`,
		`{"command":"ls"}`,
		`{"command":"Get-ChildItem","shell":"powershell"}`,
		`{"argv":["printf","%s","a"],"timeout_s":0}`,
	},
	ToolReadFile:  {`{"path":"README.md"}`, `{"path":"/etc/hostname"}`},
	ToolWriteFile: {`{"path":"a/b.txt","content":"hello\n"}`, `{"path":"empty","content":""}`},
	ToolEditFile:  {`{"path":"main.go","old":"foo","new":"bar"}`, `{"path":"main.go","old":"foo\n","new":""}`},
	ToolListDir:   {`{"path":"repos"}`, `{}`, `{"path":""}`},
	ToolGitClone: {
		`{"url":"https://example.com/r.git","name":"r","ref":"main"}`,
		`{"url":"/srv/git/x.git","name":"x.y_z-1"}`,
	},
}

// invalid are, per tool, arguments the schema rejects (the remote checks
// these after decoding).
var invalid = map[string][]string{
	ToolExec:      {`{"command":1}`, `{"argv":[]}`, `{"timeout_s":-1}`, `{"timeout_s":1.5}`, `{"env":{"A":1}}`, `{"command":"ls","shell":"fish"}`},
	ToolReadFile:  {`{}`, `{"path":""}`},
	ToolWriteFile: {`{"path":"a"}`, `{"content":"x"}`},
	ToolEditFile:  {`{"path":"a","old":"","new":"x"}`, `{"path":"a","old":"x"}`},
	ToolListDir:   {`{"path":3}`},
	ToolGitClone:  {`{"name":"x"}`, `{"url":"u"}`, `{"url":"u","name":".."}`, `{"url":"u","name":"a/b"}`, `{"url":"u","name":"-x"}`},
}

func TestSchemaAndDecoderAgree(t *testing.T) {
	for _, spec := range Tools() {
		_, r := schemaOf(t, spec)
		exs := examples[spec.Name]
		if len(exs) == 0 {
			t.Errorf("%s: no examples", spec.Name)
			continue
		}
		set := map[string]bool{}
		for _, ex := range exs {
			var m map[string]any
			if err := json.Unmarshal([]byte(ex), &m); err != nil {
				t.Fatalf("bad example %s: %v", ex, err)
			}
			for k := range m {
				set[k] = true
			}
		}
		args, _ := NewToolArgs(spec.Name)
		for name := range jsonFields(reflect.TypeOf(args).Elem()) {
			if !set[name] {
				t.Errorf("%s: no example sets %q", spec.Name, name)
			}
		}
		for _, ex := range exs {
			if err := validate(t, r, ex); err != nil {
				t.Errorf("%s: schema rejects %s: %v", spec.Name, ex, err)
			}
			if err := decodeStrict(spec.Name, []byte(ex)); err != nil {
				t.Errorf("%s: decoder rejects %s: %v", spec.Name, ex, err)
			}
			// A field the schema does not name is refused by both.
			bad := strings.TrimSuffix(strings.TrimSpace(ex), "}")
			if strings.TrimSpace(bad) != "{" {
				bad += ","
			}
			bad += `"no_such_field":true}`
			if err := validate(t, r, bad); err == nil {
				t.Errorf("%s: schema accepts %s", spec.Name, bad)
			}
			if err := decodeStrict(spec.Name, []byte(bad)); err == nil || !strings.Contains(err.Error(), "unknown field") {
				t.Errorf("%s: decoder accepts %s (err %v)", spec.Name, bad, err)
			}
		}
		for _, ex := range invalid[spec.Name] {
			if err := validate(t, r, ex); err == nil {
				t.Errorf("%s: schema accepts %s", spec.Name, ex)
			}
		}
	}
}

// TestEncodedArgsFitSchema fills every field of each argument type and checks
// that what encoding/json makes of it is valid per the schema.
func TestEncodedArgsFitSchema(t *testing.T) {
	for _, spec := range Tools() {
		_, r := schemaOf(t, spec)
		args, _ := NewToolArgs(spec.Name)
		v := reflect.ValueOf(args).Elem()
		for i := range v.NumField() {
			fill(t, v.Field(i))
		}
		if spec.Name == ToolExec {
			v.FieldByName("Argv").SetZero() // exactly one of command and argv
			v.FieldByName("Shell").SetString(ShellSh)
		}
		if spec.Name == ToolComputer { // an enum and fixed-length points
			*args.(*ComputerArgs) = ComputerArgs{Action: ComputerZoom, Coordinate: []int{1, 1}, StartCoordinate: []int{0, 0},
				Text: "x", Key: "shift", ScrollDirection: "up", ScrollAmount: new(int), Duration: new(float64), Region: []int{0, 0, 1, 1}}
		}
		raw, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(t, r, string(raw)); err != nil {
			t.Errorf("%s: schema rejects encoded %s: %v", spec.Name, raw, err)
		}
		// And a zero value encodes to something the decoder takes back.
		zero, _ := NewToolArgs(spec.Name)
		raw, _ = json.Marshal(zero)
		if err := decodeStrict(spec.Name, raw); err != nil {
			t.Errorf("%s: decoder rejects encoded zero value %s: %v", spec.Name, raw, err)
		}
	}
}

func fill(t *testing.T, f reflect.Value) {
	switch f.Kind() {
	case reflect.String:
		f.SetString("x")
	case reflect.Int, reflect.Int64:
		f.SetInt(1)
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Float64:
		f.SetFloat(1)
	case reflect.Pointer:
		p := reflect.New(f.Type().Elem())
		fill(t, p.Elem())
		f.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(f.Type(), 1, 1)
		fill(t, s.Index(0))
		f.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(f.Type())
		k, e := reflect.New(f.Type().Key()).Elem(), reflect.New(f.Type().Elem()).Elem()
		fill(t, k)
		fill(t, e)
		m.SetMapIndex(k, e)
		f.Set(m)
	default:
		t.Fatalf("fill: add a case for %s", f.Type())
	}
}
