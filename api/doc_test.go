package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// parsePackage parses the non-test files of package api.
func parsePackage(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files[n] = f
	}
	return fset, files
}

// TestDocumented: the package has a doc comment, and every exported name
// has one: a function, a method of an exported type, a type, and a
// constant or variable (its own comment, or its group's).
func TestDocumented(t *testing.T) {
	t.Parallel()
	fset, files := parsePackage(t)
	pkgDoc := false
	for name, f := range files {
		if f.Doc != nil {
			pkgDoc = true
			if !strings.HasPrefix(f.Doc.Text(), "Package api ") {
				t.Errorf("%s: the package doc starts %q, want \"Package api …\"", name, strings.SplitN(f.Doc.Text(), "\n", 2)[0])
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				if d.Recv != nil && !ast.IsExported(receiverType(d.Recv.List[0].Type)) {
					continue
				}
				t.Errorf("%s: %s has no doc comment", fset.Position(d.Pos()), d.Name.Name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() && s.Doc == nil && (d.Doc == nil || d.Lparen.IsValid()) {
							t.Errorf("%s: type %s has no doc comment", fset.Position(s.Pos()), s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
								t.Errorf("%s: %s has no doc comment", fset.Position(n.Pos()), n.Name)
							}
						}
					}
				}
			}
		}
	}
	if !pkgDoc {
		t.Error("package api has no doc comment")
	}
}

func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return receiverType(e.X)
	}
	return ""
}

// notJSON are exported structs that are never JSON: binary gateway
// messages, and the spawn contract's variable names.
var notJSON = map[string]bool{"ArtifactChunk": true, "OutputFrame": true, "EnvVar": true, "FrameType": true, "DesktopTiles": true, "DesktopTile": true}

// foreignNames are JSON names another protocol spells: MCP's tools/list
// answer has inputSchema.
var foreignNames = map[string]bool{"ToolSpec.inputSchema": true}

var jsonName = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestJSONTags: every exported field of an exported struct has a JSON
// tag with a snake_case name (embedded structs are inlined and need none),
// and no struct spells one name twice.
func TestJSONTags(t *testing.T) {
	t.Parallel()
	fset, files := parsePackage(t)
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() || notJSON[ts.Name.Name] {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			seen := map[string]bool{}
			for _, fl := range st.Fields.List {
				if len(fl.Names) == 0 {
					continue // embedded
				}
				for _, name := range fl.Names {
					if !name.IsExported() {
						continue
					}
					where := fset.Position(name.Pos())
					if fl.Tag == nil {
						t.Errorf("%s: %s.%s has no json tag", where, ts.Name.Name, name.Name)
						continue
					}
					tag, _ := strconv.Unquote(fl.Tag.Value)
					j, ok := reflect.StructTag(tag).Lookup("json")
					if !ok {
						t.Errorf("%s: %s.%s has no json tag", where, ts.Name.Name, name.Name)
						continue
					}
					jn, _, _ := strings.Cut(j, ",")
					if jn == "-" {
						continue
					}
					if !jsonName.MatchString(jn) && !foreignNames[ts.Name.Name+"."+jn] {
						t.Errorf("%s: %s.%s is %q on the wire, not snake_case", where, ts.Name.Name, name.Name, jn)
					}
					if seen[jn] {
						t.Errorf("%s: %s spells %q twice", where, ts.Name.Name, jn)
					}
					seen[jn] = true
				}
			}
			return true
		})
	}
}
