package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestToolViews checks every tool's target and summary on a sample call,
// and that no tool is left without them: a tool added to the registry
// fails here until it says how its calls read.
func TestToolViews(t *testing.T) {
	t.Parallel()
	patch := "--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-a\n+b\n--- a/gone\n+++ /dev/null\n"
	cases := map[string]struct {
		args, value    any
		target, result string
	}{
		ToolExec: {ExecArgs{Argv: []string{"echo", "it's", "a b", ""}}, ExecResult{ExitCode: 0},
			`echo 'it'\''s' 'a b' ''`, ""},
		ToolReadFile: {ReadFileArgs{Path: "a/b.go"}, ReadFileResult{Content: "a\nb\nc", Size: 2150, TotalLines: 9},
			"a/b.go", "3 lines of 9, 2.1 KiB file"},
		ToolWriteFile: {WriteFileArgs{Path: "x", Content: "hi"}, WriteFileResult{Bytes: 2},
			"x", "wrote 2 B"},
		ToolEditFile: {EditFileArgs{Path: "x.go", Old: "a", New: "b"}, EditFileResult{Line: 7},
			"x.go", "changed at line 7"},
		ToolListDir: {ListDirArgs{}, ListDirResult{Entries: []DirEntry{{Name: "a"}}},
			".", "1 entry"},
		ToolGitClone: {GitCloneArgs{URL: "file:///srv/app.git", Name: "app", Ref: "main"}, GitCloneResult{Path: "repos/app", Head: "9f8e7d6c5b4a", Reused: true},
			"app ← file:///srv/app.git @ main", "repos/app at 9f8e7d6 (reused)"},
		ToolBrowserNavigate: {BrowserNavigateArgs{URL: "https://example.com/"}, BrowserNavigateResult{URL: "https://example.com/login", Title: "Sign in"},
			"https://example.com/", `"Sign in" at https://example.com/login`},
		ToolBrowserClick: {BrowserClickArgs{Selector: "#go"}, struct{}{}, "#go", ""},
		ToolBrowserType:  {BrowserTypeArgs{Selector: "#q", Text: "hi"}, struct{}{}, "#q", ""},
		ToolBrowserPress: {BrowserPressArgs{Key: "Enter"}, struct{}{}, "Enter", ""},
		ToolBrowserScreenshot: {BrowserScreenshotArgs{Name: "home"}, BrowserFileResult{Path: "/w/home.png", Size: 2048, Width: 800, Height: 600},
			"home", "home.png, 800×600, 2.0 KiB"},
		ToolBrowserText: {BrowserTextArgs{Selector: "main"}, BrowserTextResult{Text: "héllo", Truncated: true},
			"main", "5 characters (more not shown)"},
		ToolBrowserEval: {BrowserEvalArgs{Expression: "1+1"}, 2, "1+1", ""},
		ToolBrowserConsole: {BrowserConsoleArgs{}, BrowserConsoleResult{Messages: make([]BrowserConsoleMessage, 2)},
			"", "2 messages"},
		ToolRecordStart: {RecordStartArgs{Name: "demo"}, RecordStartResult{Path: "/w/demo.mp4"},
			"demo", "recording to demo.mp4"},
		ToolRecordStop: {RecordStopArgs{}, BrowserFileResult{Path: "/w/demo.mp4", Size: 3 << 20, DurationMS: 4200, Artifact: &ArtifactRef{Name: "demo.mp4"}},
			"", "demo.mp4, 4.2 s, 3.0 MiB"},
		ToolComputer: {ComputerArgs{Action: ComputerLeftClick, Coordinate: []int{10, 20}}, ComputerResult{Image: &ComputerImage{}, Width: 1280, Height: 800},
			"left_click 10,20", "screenshot 1280×800"},
		ToolUploadArtifact: {UploadArtifactArgs{Path: "out/report.html"}, ArtifactRef{Name: "report.html", Size: 812},
			"out/report.html", "artifact report.html, 812 B"},
		ToolShellStart: {ShellStartArgs{Name: "dev"}, ShellStartResult{Name: "dev", Shell: "bash", PID: 42},
			"dev", "shell dev (bash, pid 42)"},
		ToolShellRun: {ShellRunArgs{Name: "dev", Command: "npm start"}, ShellRunResult{Running: true},
			"[dev] npm start", "still running"},
		ToolShellWrite:     {ShellWriteArgs{Name: "dev", Text: "y\n"}, ShellWriteResult{Bytes: 2}, "[dev] y\n", ""},
		ToolShellRead:      {ShellReadArgs{Name: "dev"}, ShellReadResult{}, "dev", ""},
		ToolShellInterrupt: {ShellInterruptArgs{Name: "dev"}, ShellDoneResult{Name: "dev"}, "dev", ""},
		ToolShellKill:      {ShellKillArgs{Name: "dev"}, ShellDoneResult{Name: "dev"}, "dev", ""},
		ToolApplyPatch: {ApplyPatchArgs{Patch: patch}, ApplyPatchResult{Files: []string{"x.go", "gone"}},
			"x.go", "x.go, gone"},
		ToolGlob: {GlobArgs{Pattern: "**/*.go"}, GlobResult{Matches: []string{"a.go", "b.go"}, Truncated: true},
			"**/*.go", "2 matches (more not shown)"},
		ToolGrep: {GrepArgs{Pattern: "TODO", Path: "src"}, GrepResult{Matches: []GrepMatch{{File: "a.go"}}},
			"TODO in src", "1 match"},
		ToolGitStatus: {GitStatusArgs{Repo: "app"}, GitStatusResult{Head: "1a2b3c4d5e", Files: make([]GitFileStatus, 2)},
			"app", "detached at 1a2b3c4, 2 changed files"},
		ToolGitDiff: {GitDiffArgs{Repo: "app"}, GitDiffResult{},
			"app", "no changes"},
		ToolGitCheckout: {GitCheckoutArgs{Repo: "app", Ref: "v2"}, GitCheckoutResult{Branch: "v2", Head: "abc"},
			"app → v2", "v2 at abc"},
		ToolGitCommit: {GitCommitArgs{Repo: "app", Message: "Fix it"}, GitCommitResult{Commit: "1a2b3c4d5e6f", Branch: "main"},
			"app: Fix it", "commit 1a2b3c4 on main"},
		ToolGitPush: {GitPushArgs{Repo: "app", Branch: "fix"}, GitPushResult{Remote: "origin", Branch: "fix", Commit: "1a2b3c4d5e6f"},
			"app → origin/fix", "pushed fix (1a2b3c4) to origin"},
		ToolNetworkAccessRequest: {NetworkAccessRequestArgs{Domains: []string{"a.test", "*.b.test"}, Reason: "r"},
			NetworkAccessResult{Granted: true, Scope: NetworkGrantSession}, "a.test, *.b.test", "granted for the session"},
	}
	for _, name := range ToolNames() {
		c, ok := cases[name]
		if !ok {
			t.Errorf("tool %s has no case here: add one, with its target and summary", name)
			continue
		}
		delete(cases, name)
		if got := CallTarget(name, encode(t, c.args)); got != c.target {
			t.Errorf("CallTarget(%s) = %q, want %q", name, got, c.target)
		}
		if got := ResultSummary(name, encode(t, c.value)); got != c.result {
			t.Errorf("ResultSummary(%s) = %q, want %q", name, got, c.result)
		}
		// A tool whose arguments have fields says what its calls work on.
		d := toolTable[toolIndex[name]]
		if fields, _ := json.Marshal(d.newArgs()); string(fields) != "{}" && d.target == nil {
			t.Errorf("tool %s has arguments but no target", name)
		}
	}
	for name := range cases {
		t.Errorf("case for %s, which is not a tool", name)
	}
}

// TestToolViewsOfBadInput checks that what cannot be decoded, and tools
// that do not exist, read as nothing rather than as a zero value.
func TestToolViewsOfBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool, raw string
	}{
		{"some_tool", `{"x":"y"}`},
		{ToolReadFile, `{"path":3}`},
		{ToolReadFile, ``},
		{ToolExec, `[`},
		{ToolBrowserConsole, `{}`},
	} {
		if got := CallTarget(tc.tool, json.RawMessage(tc.raw)); got != "" {
			t.Errorf("CallTarget(%s, %s) = %q, want nothing", tc.tool, tc.raw, got)
		}
	}
	for _, tc := range []struct {
		tool, raw string
	}{
		{"some_tool", `{"bytes":2}`},
		{ToolWriteFile, `{"bytes":"two"}`},
		{ToolWriteFile, ``},
		{ToolExec, `{"exit_code":0}`},
		{ToolEditFile, `{"line":0}`},
	} {
		if got := ResultSummary(tc.tool, json.RawMessage(tc.raw)); got != "" {
			t.Errorf("ResultSummary(%s, %s) = %q, want nothing", tc.tool, tc.raw, got)
		}
	}
	// A long title and URL are cut, the cut marked.
	long := ResultSummary(ToolBrowserNavigate, encode(t, BrowserNavigateResult{URL: "https://x/" + strings.Repeat("a", 300), Title: strings.Repeat("t", 100)}))
	if want := `"` + strings.Repeat("t", 79) + `…" at https://x/` + strings.Repeat("a", 189) + "…"; long != want {
		t.Errorf("long navigate summary %q", long)
	}
}

func encode(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
