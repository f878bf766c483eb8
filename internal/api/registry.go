package api

//go:generate go run ./gentools -o ../../docs/tools.md

import (
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
)

// toolDef is one tool: its name, what it does, and its argument type. The
// argument type is the one the remote decodes (strictly) and the one its JSON
// schema is generated from, so there is one definition per tool.
type toolDef struct {
	name        string
	description string
	// newArgs returns a pointer to a zero argument value.
	newArgs func() any
	// schema generates the argument type's JSON schema.
	schema func() (*jsonschema.Schema, error)
	// refine adds constraints that a Go type cannot express (bounds,
	// patterns); it must not add, remove or rename properties. May be nil.
	refine func(*jsonschema.Schema)
}

// tool defines a tool whose arguments are a T.
func tool[T any](name, description string, refine func(*jsonschema.Schema)) toolDef {
	return toolDef{
		name:        name,
		description: description,
		newArgs:     func() any { return new(T) },
		schema:      func() (*jsonschema.Schema, error) { return jsonschema.For[T](schemaOptions) },
		refine:      refine,
	}
}

// toolTable is the one list of tools, in the order ToolNames and Tools give
// them. The control plane validates script steps against it, models and MCP
// clients are shown the schemas generated from it, and docs/tools.md is
// rendered from it.
var toolTable = []toolDef{
	tool[ExecArgs](ToolExec,
		"Run a command in the workspace on the remote machine and return its exit code, duration and the tail of its "+
			"combined output (the full output streams as it runs). Set exactly one of command (a shell command line, "+
			"run by sh -c) and argv (a program and its arguments, run without a shell). cwd is relative to the workspace "+
			"unless absolute; the command and its children are killed after timeout_s seconds (default 600).",
		func(s *jsonschema.Schema) {
			prop(s, "argv").MinItems = jsonschema.Ptr(1)
			prop(s, "timeout_s").Minimum = jsonschema.Ptr(0.0)
		}),
	tool[ReadFileArgs](ToolReadFile,
		"Read a text file and return its content and size in bytes. path is relative to the workspace unless absolute. "+
			"Files over 10 MiB are refused: read part of them with exec (head, tail, sed -n); directories are refused: use list_dir.",
		func(s *jsonschema.Schema) {
			prop(s, "path").MinLength = jsonschema.Ptr(1)
		}),
	tool[WriteFileArgs](ToolWriteFile,
		"Write a file with the given content, replacing it whole if it exists (its mode is kept) and creating parent "+
			"directories; return the number of bytes written. path is relative to the workspace unless absolute. "+
			"The write is atomic (a temporary file and a rename), and a symlink is written through.",
		func(s *jsonschema.Schema) {
			prop(s, "path").MinLength = jsonschema.Ptr(1)
		}),
	tool[EditFileArgs](ToolEditFile,
		"Replace the text old with new in a file and return the 1-based line where the replacement starts. "+
			"old must occur exactly once in the file, whitespace included: include surrounding lines to make it unique. "+
			"path is relative to the workspace unless absolute; files over 10 MiB are refused.",
		func(s *jsonschema.Schema) {
			prop(s, "path").MinLength = jsonschema.Ptr(1)
			prop(s, "old").MinLength = jsonschema.Ptr(1)
		}),
	tool[ListDirArgs](ToolListDir,
		"List a directory, sorted by name: each entry's name, type (file, dir, symlink or other) and, for files, size in bytes. "+
			"path is relative to the workspace unless absolute; empty or absent lists the workspace.",
		nil),
	tool[GitCloneArgs](ToolGitClone,
		"Clone a git repository into repos/<name> in the workspace, or, when that clone is already there, set its origin "+
			"to url and fetch; then check out ref if given. Return the clone's path, its HEAD commit and whether an "+
			"existing clone was reused.",
		func(s *jsonschema.Schema) {
			prop(s, "url").MinLength = jsonschema.Ptr(1)
			prop(s, "name").Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`
		}),
}

// prop returns the schema of s's property name, for refine functions. A
// missing property is a programming error (a field renamed in tools.go but
// not here), caught by the package's tests.
func prop(s *jsonschema.Schema, name string) *jsonschema.Schema {
	p := s.Properties[name]
	if p == nil {
		panic(fmt.Sprintf("api: tool schema has no property %q", name))
	}
	return p
}

// schemaOptions make slices plain arrays: the generator would allow null for
// a nil slice, which models need not be told about.
var schemaOptions = &jsonschema.ForOptions{
	TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[[]string](): {Type: "array", Items: &jsonschema.Schema{Type: "string"}},
	},
}

// toolIndex maps a tool's name to its position in toolTable.
var toolIndex = func() map[string]int {
	m := make(map[string]int, len(toolTable))
	for i, d := range toolTable {
		m[d.name] = i
	}
	return m
}()

// NewToolArgs returns a pointer to a zero argument value for tool, or false
// when no such tool exists.
func NewToolArgs(tool string) (any, bool) {
	i, ok := toolIndex[tool]
	if !ok {
		return nil, false
	}
	return toolTable[i].newArgs(), true
}

// ToolNames lists every tool, in a stable order.
func ToolNames() []string {
	names := make([]string, len(toolTable))
	for i, d := range toolTable {
		names[i] = d.name
	}
	return names
}
