package main

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// okSummary is the useful part of a successful tool result, shown after
// "[ok]" in transcripts: what a read_file read, what a git call left
// checked out, where a browser went. It is "" for tools without one, and
// for a value it cannot decode.
func okSummary(tool string, value json.RawMessage) string {
	if len(value) == 0 {
		return ""
	}
	dec := func(v any) bool { return json.Unmarshal(value, v) == nil }
	switch tool {
	case api.ToolReadFile:
		var r api.ReadFileResult
		if !dec(&r) {
			return ""
		}
		lines := countLines(r.Content)
		if r.TotalLines > 0 {
			return fmt.Sprintf("%s of %d, %s file", plural(lines, "line"), r.TotalLines, byteSize(r.Size))
		}
		return fmt.Sprintf("%s, %s", plural(lines, "line"), byteSize(r.Size))
	case api.ToolWriteFile:
		var r api.WriteFileResult
		if dec(&r) {
			return "wrote " + byteSize(r.Bytes)
		}
	case api.ToolEditFile:
		var r api.EditFileResult
		if dec(&r) && r.Line > 0 {
			return fmt.Sprintf("changed at line %d", r.Line)
		}
	case api.ToolApplyPatch:
		var r api.ApplyPatchResult
		if dec(&r) {
			return listSummary(r.Files, "file")
		}
	case api.ToolListDir:
		var r api.ListDirResult
		if dec(&r) {
			return plural(len(r.Entries), "entry")
		}
	case api.ToolGlob:
		var r api.GlobResult
		if dec(&r) {
			return plural(len(r.Matches), "match") + truncatedText(r.Truncated)
		}
	case api.ToolGrep:
		var r api.GrepResult
		if dec(&r) {
			return plural(len(r.Matches), "match") + truncatedText(r.Truncated)
		}
	case api.ToolGitClone:
		var r api.GitCloneResult
		if dec(&r) {
			s := orDash(r.Path) + " at " + shortCommit(r.Head)
			if r.Reused {
				s += " (reused)"
			}
			return s
		}
	case api.ToolGitStatus:
		var r api.GitStatusResult
		if dec(&r) {
			s := branchAt(r.Branch, r.Head)
			if r.Clean {
				return s + ", clean"
			}
			return s + ", " + plural(len(r.Files), "changed file") + truncatedText(r.Truncated)
		}
	case api.ToolGitCheckout:
		var r api.GitCheckoutResult
		if dec(&r) {
			return branchAt(r.Branch, r.Head)
		}
	case api.ToolGitCommit:
		var r api.GitCommitResult
		if dec(&r) {
			return "commit " + shortCommit(r.Commit) + onBranch(r.Branch)
		}
	case api.ToolGitPush:
		var r api.GitPushResult
		if dec(&r) {
			return fmt.Sprintf("pushed %s (%s) to %s", r.Branch, shortCommit(r.Commit), r.Remote)
		}
	case api.ToolGitDiff:
		var r api.GitDiffResult
		if dec(&r) {
			if r.Bytes == 0 {
				return "no changes"
			}
			return byteSize(r.Bytes) + " of diff" + truncatedText(r.Truncated)
		}
	case api.ToolBrowserNavigate:
		var r api.BrowserNavigateResult
		if dec(&r) {
			if r.Title == "" {
				return r.URL
			}
			return fmt.Sprintf("%q at %s", truncate(r.Title, 80), truncate(r.URL, 200))
		}
	case api.ToolBrowserText:
		var r api.BrowserTextResult
		if dec(&r) {
			return plural(len([]rune(r.Text)), "character") + truncatedText(r.Truncated)
		}
	case api.ToolBrowserConsole:
		var r api.BrowserConsoleResult
		if dec(&r) {
			return plural(len(r.Messages), "message")
		}
	case api.ToolBrowserScreenshot, api.ToolRecordStop:
		var r api.BrowserFileResult
		if dec(&r) {
			return fileSummary(r)
		}
	case api.ToolRecordStart:
		var r api.RecordStartResult
		if dec(&r) && r.Path != "" {
			return "recording to " + path.Base(r.Path)
		}
	case api.ToolUploadArtifact:
		var r api.ArtifactRef
		if dec(&r) && r.Name != "" {
			return fmt.Sprintf("artifact %s, %s", r.Name, byteSize(r.Size))
		}
	case api.ToolShellStart:
		var r api.ShellStartResult
		if dec(&r) {
			return fmt.Sprintf("shell %s (%s, pid %d)", r.Name, r.Shell, r.PID)
		}
	case api.ToolShellRun:
		var r api.ShellRunResult
		if dec(&r) {
			if r.Running {
				return "still running"
			}
			return fmt.Sprintf("exit %d", r.ExitCode)
		}
	}
	return ""
}

// fileSummary describes a screenshot or recording.
func fileSummary(r api.BrowserFileResult) string {
	name := path.Base(r.Path)
	if r.Artifact != nil {
		name = r.Artifact.Name
	}
	parts := []string{name}
	if r.Width > 0 && r.Height > 0 {
		parts = append(parts, fmt.Sprintf("%d×%d", r.Width, r.Height))
	}
	if r.DurationMS > 0 {
		parts = append(parts, fmt.Sprintf("%.1f s", float64(r.DurationMS)/1000))
	}
	parts = append(parts, byteSize(r.Size))
	return strings.Join(parts, ", ")
}

// countLines counts the lines of text, a last line without a newline
// included.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// plural is "1 entry", "3 entries", "2 matches".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	switch {
	case strings.HasSuffix(noun, "y"):
		noun = strings.TrimSuffix(noun, "y") + "ies"
	case strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "s"):
		noun += "es"
	default:
		noun += "s"
	}
	return fmt.Sprintf("%d %s", n, noun)
}

// listSummary names up to three items and counts the rest.
func listSummary(items []string, noun string) string {
	if len(items) == 0 || len(items) > 3 {
		return plural(len(items), noun)
	}
	return strings.Join(items, ", ")
}

// byteSize is a size for people: "812 B", "1.2 KiB", "3.4 MiB".
func byteSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

func shortCommit(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return orDash(sha)
}

func branchAt(branch, head string) string {
	if branch == "" {
		return "detached at " + shortCommit(head)
	}
	return branch + " at " + shortCommit(head)
}

func onBranch(branch string) string {
	if branch == "" {
		return " (detached HEAD)"
	}
	return " on " + branch
}

func truncatedText(t bool) string {
	if t {
		return " (more not shown)"
	}
	return ""
}
