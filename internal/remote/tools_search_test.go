package remote

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// writeFiles creates files (path → content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		m[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestReadFileRangeAndBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	ctx := context.Background()
	writeFiles(t, dir, map[string]string{"five": "1\n2\n3\n4\n5\n", "noeol": "a\nb", "bin": "ELF\x00\x01\x02"})
	for _, c := range []struct {
		path       string
		start, end int
		want       string
		total      int
	}{
		{"five", 2, 4, "2\n3\n4\n", 5},
		{"five", 4, 0, "4\n5\n", 5},
		{"five", 0, 1, "1\n", 5},
		{"five", 5, 99, "5\n", 5},
		{"five", 6, 0, "", 5},
		{"noeol", 2, 2, "b", 2},
	} {
		var rr api.ReadFileResult
		if err := tc.run(t, ctx, api.ToolReadFile, api.ReadFileArgs{Path: c.path, StartLine: c.start, EndLine: c.end}, &rr); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if rr.Content != c.want || rr.TotalLines != c.total {
			t.Errorf("%s %d-%d = %q (%d lines), want %q (%d)", c.path, c.start, c.end, rr.Content, rr.TotalLines, c.want, c.total)
		}
	}
	var rr api.ReadFileResult
	if err := tc.run(t, ctx, api.ToolReadFile, api.ReadFileArgs{Path: "five"}, &rr); err != nil || rr.Content != "1\n2\n3\n4\n5\n" || rr.TotalLines != 0 {
		t.Errorf("whole file = %+v, %v", rr, err)
	}
	if err := tc.run(t, ctx, api.ToolReadFile, api.ReadFileArgs{Path: "five", StartLine: 3, EndLine: 2}, nil); err == nil || !strings.Contains(err.Error(), "bad arguments") {
		t.Errorf("start after end: %v", err)
	}
	if err := tc.run(t, ctx, api.ToolReadFile, api.ReadFileArgs{Path: "bin"}, nil); err == nil || !strings.Contains(err.Error(), "binary") || !strings.Contains(err.Error(), "xxd") {
		t.Errorf("binary file: %v", err)
	}
}

func TestApplyPatch(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	ctx := context.Background()
	writeFiles(t, dir, map[string]string{
		"src/main.go": "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n",
		"old.txt":     "bye\n",
		"keep.txt":    "same\n",
	})
	good := `diff --git a/src/main.go b/src/main.go
--- a/src/main.go
+++ b/src/main.go
@@ -1,5 +1,5 @@
 package main
 
 func main() {
-	println("hi")
+	println("hello")
 }
diff --git a/new/file.txt b/new/file.txt
new file mode 100644
--- /dev/null
+++ b/new/file.txt
@@ -0,0 +1,2 @@
+one
+two
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
`
	var res api.ApplyPatchResult
	if err := tc.run(t, ctx, api.ToolApplyPatch, api.ApplyPatchArgs{Patch: good}, &res); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if want := []string{"new/file.txt", "old.txt", "src/main.go"}; !slices.Equal(res.Files, want) {
		t.Errorf("files = %v, want %v", res.Files, want)
	}
	want := map[string]string{
		"src/main.go":  "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n",
		"new/file.txt": "one\ntwo\n",
		"keep.txt":     "same\n",
	}
	if got := readTree(t, dir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tree = %q, want %q", got, want)
	}

	// The first file's hunk applies, the second's does not: nothing changes.
	bad := `--- a/keep.txt
+++ b/keep.txt
@@ -1 +1 @@
-same
+changed
--- a/src/main.go
+++ b/src/main.go
@@ -3,3 +3,3 @@
 func main() {
-	println("not there")
+	println("x")
 }
`
	err := tc.run(t, ctx, api.ToolApplyPatch, api.ApplyPatchArgs{Patch: bad}, nil)
	if err == nil || !strings.Contains(err.Error(), "nothing was changed") || !strings.Contains(err.Error(), "src/main.go") {
		t.Fatalf("bad patch: %v", err)
	}
	if got := readTree(t, dir); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("a failed patch changed the tree: %q", got)
	}
	// Paths without a/ b/ prefixes, and a missing final newline.
	plain := "--- keep.txt\n+++ keep.txt\n@@ -1 +1 @@\n-same\n+plain"
	if err := tc.run(t, ctx, api.ToolApplyPatch, api.ApplyPatchArgs{Patch: plain}, &res); err != nil || !slices.Equal(res.Files, []string{"keep.txt"}) {
		t.Fatalf("plain patch: %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(b) != "plain\n" {
		t.Errorf("keep.txt = %q", b)
	}
	// Miscounted hunk headers are counted again.
	miscounted := "--- a/keep.txt\n+++ b/keep.txt\n@@ -1,4 +1,7 @@\n-plain\n+counted\n"
	if err := tc.run(t, ctx, api.ToolApplyPatch, api.ApplyPatchArgs{Patch: miscounted}, nil); err != nil {
		t.Fatalf("miscounted patch: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(b) != "counted\n" {
		t.Errorf("keep.txt = %q", b)
	}
	// Garbage, and a path out of the workspace.
	if err := tc.run(t, ctx, api.ToolApplyPatch, api.ApplyPatchArgs{Patch: "hello"}, nil); err == nil {
		t.Error("garbage applied")
	}
	escape := "--- /dev/null\n+++ b/../escaped.txt\n@@ -0,0 +1 @@\n+x\n"
	if err := tc.run(t, ctx, api.ToolApplyPatch, api.ApplyPatchArgs{Patch: escape}, nil); err == nil {
		t.Error("a patch outside the workspace applied")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escaped.txt")); err == nil {
		t.Error("escaped.txt was written")
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	ctx := context.Background()
	writeFiles(t, dir, map[string]string{
		"a.go": "", "b.txt": "", "src/x.go": "", "src/deep/y.go": "", "src/deep/z.md": "", ".git/config.go": "",
	})
	for pattern, want := range map[string][]string{
		"*.go":            {"a.go"},
		"**/*.go":         {"a.go", "src/deep/y.go", "src/x.go"},
		"src/**/*.go":     {"src/deep/y.go", "src/x.go"},
		"src/*/?.md":      {"src/deep/z.md"},
		"src/deep":        {"src/deep"},
		"[ab].*":          {"a.go", "b.txt"},
		".git/*":          {".git/config.go"},
		"nothing/**":      {},
		dir + "/src/*.go": {dir + "/src/x.go"},
	} {
		var res api.GlobResult
		if err := tc.run(t, ctx, api.ToolGlob, api.GlobArgs{Pattern: pattern}, &res); err != nil {
			t.Fatalf("%s: %v", pattern, err)
		}
		if !slices.Equal(res.Matches, want) || res.Truncated {
			t.Errorf("glob %s = %v (truncated %v), want %v", pattern, res.Matches, res.Truncated, want)
		}
	}
	if err := tc.run(t, ctx, api.ToolGlob, api.GlobArgs{Pattern: "[a"}, nil); err == nil || !strings.Contains(err.Error(), "bad arguments") {
		t.Errorf("bad pattern: %v", err)
	}
	// The limit.
	many := filepath.Join(dir, "many")
	if err := os.Mkdir(many, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range maxGlobMatches + 5 {
		if err := os.WriteFile(filepath.Join(many, fmt.Sprintf("f%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var res api.GlobResult
	if err := tc.run(t, ctx, api.ToolGlob, api.GlobArgs{Pattern: "many/*"}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Matches) != maxGlobMatches || !res.Truncated || !slices.IsSorted(res.Matches) {
		t.Errorf("glob many/* = %d matches, truncated %v", len(res.Matches), res.Truncated)
	}
}

func TestGrep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tc := newTestCall(t, dir, nil)
	ctx := context.Background()
	long := strings.Repeat("é", 400) + " TODO"
	writeFiles(t, dir, map[string]string{
		"a.go":          "package a\n// TODO one\nfunc A() {}\n// todo two\n",
		"src/b.go":      "package b\n\n// TODO three\n",
		"src/c.txt":     "TODO four\n",
		"src/long.txt":  long + "\n",
		".git/HEAD":     "TODO hidden\n",
		"bin.dat":       "TODO\x00binary",
		"sub/big.txt":   strings.Repeat("x", maxGrepFile) + "\nTODO big\n",
		"sub/crlf.txt":  "x\r\nTODO crlf\r\n",
		"other/keep.go": "TODO five\n",
	})
	grep := func(a api.GrepArgs) api.GrepResult {
		t.Helper()
		var res api.GrepResult
		if err := tc.run(t, ctx, api.ToolGrep, a, &res); err != nil {
			t.Fatalf("grep %+v: %v", a, err)
		}
		return res
	}
	res := grep(api.GrepArgs{Pattern: "TODO"})
	var got []string
	for _, m := range res.Matches {
		got = append(got, fmt.Sprintf("%s:%d:%s", m.File, m.Line, m.Text))
	}
	want := []string{"a.go:2:// TODO one", "other/keep.go:1:TODO five", "src/b.go:3:// TODO three", "src/c.txt:1:TODO four",
		"src/long.txt:1:" + strings.Repeat("é", 250) + "…", "sub/crlf.txt:2:TODO crlf"}
	if !slices.Equal(got, want) || res.Truncated {
		t.Errorf("grep TODO =\n%q\nwant\n%q", got, want)
	}
	if res := grep(api.GrepArgs{Pattern: "todo", IgnoreCase: true, Include: "*.go"}); len(res.Matches) != 4 {
		t.Errorf("ignore case, *.go: %+v", res.Matches)
	}
	if res := grep(api.GrepArgs{Pattern: "TODO", Path: "src", Include: "**/*.go"}); len(res.Matches) != 1 || res.Matches[0].File != "src/b.go" {
		t.Errorf("path src, **/*.go: %+v", res.Matches)
	}
	if res := grep(api.GrepArgs{Pattern: "TODO", Path: "a.go"}); len(res.Matches) != 1 {
		t.Errorf("one file: %+v", res.Matches)
	}
	if res := grep(api.GrepArgs{Pattern: "TODO", MaxMatches: 2}); len(res.Matches) != 2 || !res.Truncated {
		t.Errorf("max 2: %+v", res)
	}
	if err := tc.run(t, ctx, api.ToolGrep, api.GrepArgs{Pattern: "("}, nil); err == nil || !strings.Contains(err.Error(), "bad arguments") {
		t.Errorf("bad regexp: %v", err)
	}
	if err := tc.run(t, ctx, api.ToolGrep, api.GrepArgs{Pattern: "x", Path: "missing"}, nil); err == nil {
		t.Error("grep of a missing path succeeded")
	}
}
