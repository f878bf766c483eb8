package api

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// frameConstants returns the value of every Frame* string constant declared
// in the package's non-test files, by name.
func frameConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "Frame") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					out[id.Name] = constant.StringVal(constant.MakeFromLiteral(lit.Value, lit.Kind, 0))
				}
			}
		}
	}
	return out
}

// TestFrameTypesCoverFrameConstants: every Frame* constant of the package is
// in FrameTypes, and every JSON entry of FrameTypes is a Frame* constant, so
// a new frame cannot be added without saying which version introduced it.
func TestFrameTypesCoverFrameConstants(t *testing.T) {
	consts := frameConstants(t)
	if len(consts) < 11 {
		t.Fatalf("found only %d Frame* constants: %v", len(consts), consts)
	}
	values := map[string]bool{}
	for name, v := range consts {
		values[v] = true
		if FrameSince(v) == 0 {
			t.Errorf("%s (%q) is not in FrameTypes", name, v)
		}
	}
	seen := map[string]bool{}
	for _, ft := range FrameTypes {
		if seen[ft.Name] {
			t.Errorf("%q is listed twice", ft.Name)
		}
		seen[ft.Name] = true
		if !ft.Binary && !values[ft.Name] {
			t.Errorf("FrameTypes lists %q, which is no Frame* constant", ft.Name)
		}
		if ft.Binary && values[ft.Name] {
			t.Errorf("binary message %q has the name of a JSON frame", ft.Name)
		}
		if ft.Since < MinProtocolVersion || ft.Since > CurrentProtocolVersion {
			t.Errorf("%q: since version %d, outside [%d, %d]", ft.Name, ft.Since, MinProtocolVersion, CurrentProtocolVersion)
		}
		if !slices.Contains([]string{SentByRemote, SentByServer, SentByBoth}, ft.From) {
			t.Errorf("%q: sender %q", ft.Name, ft.From)
		}
	}
	if FrameSince("no_such_frame") != 0 || FrameSince("output") != 0 {
		t.Error("FrameSince knows a name that is no JSON frame")
	}
}

func TestProtocolVersionSupported(t *testing.T) {
	for _, c := range []struct {
		v    ProtocolVersion
		want bool
	}{
		{0, false}, {MinProtocolVersion - 1, false}, {MinProtocolVersion, true},
		{CurrentProtocolVersion, true}, {CurrentProtocolVersion + 1, false},
	} {
		if got := c.v.Supported(); got != c.want {
			t.Errorf("ProtocolVersion(%d).Supported() = %v, want %v", c.v, got, c.want)
		}
	}
	if CurrentProtocolVersion-1 < MinProtocolVersion {
		t.Error("the server no longer accepts the previous version; a rolling upgrade needs it")
	}
}

func TestDesktopTilesRoundTrip(t *testing.T) {
	t.Parallel()
	f := DesktopTiles{Keyframe: true, Width: 1280, Height: 800, Tiles: []DesktopTile{
		{X: 0, Y: 64, W: 64, H: 64, PNG: []byte("png-a")}, {X: 1216, Y: 768, W: 64, H: 32, PNG: []byte("b")},
	}}
	b := f.AppendBinary(nil)
	if !IsDesktopTiles(b) || IsArtifactChunk(b) {
		t.Fatalf("message kind not recognised")
	}
	got, err := ParseDesktopTiles(b)
	if err != nil || !got.Keyframe || got.Width != 1280 || got.Height != 800 || len(got.Tiles) != 2 ||
		got.Tiles[1].X != 1216 || string(got.Tiles[0].PNG) != "png-a" || got.Tiles[1].H != 32 {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	for _, bad := range [][]byte{b[:5], b[:len(b)-1], append(b[:len(b):len(b)], 0), {'o', 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := ParseDesktopTiles(bad); err == nil {
			t.Errorf("malformed message %q accepted", bad)
		}
	}
}
