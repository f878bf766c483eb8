package api_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// envName is an environment variable name of Outpost or of the public
// contract, as a whole string literal.
var envName = regexp.MustCompile(`^(OUTPOST|DEVIN)_[A-Z0-9_]+$`)

// TestEnvNamesSpelledOnceInModule: every environment variable name is a
// string literal in one place of the module's non-test code, where it is
// defined (an api.EnvVar, or a constant of the package that owns it);
// everything else refers to that definition. Help texts may name variables
// in prose: only whole literals count. The spawn contract's direct-serve
// pair (EnvSessionToken) shares its Outpost name with EnvConnectToken by
// design, so api/spawn.go may repeat a name.
func TestEnvNamesSpelledOnceInModule(t *testing.T) {
	root := filepath.Join("..")
	seen := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == ".git" || n == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			if v, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(v) {
				seen[v] = append(seen[v], fset.Position(lit.Pos()).String())
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 20 {
		t.Fatalf("found only %d environment names: the walk missed the module", len(seen))
	}
	for name, where := range seen {
		files := map[string]bool{}
		for _, w := range where {
			files[w[:strings.Index(w, ".go:")+3]] = true
		}
		if len(where) > 1 && !(len(files) == 1 && files[filepath.Join("..", "api", "spawn.go")]) {
			t.Errorf("%s is spelled %d times: %s; define it once and refer to that", name, len(where), strings.Join(where, ", "))
		}
	}
}
