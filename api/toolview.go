package api

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// This file says how a tool call reads to people: the target of a call
// (what it works on, from its arguments) and the summary of a successful
// result (what it did, from its value). toolTable names each tool's pair,
// so the CLI's transcript, the web UI's steps and the agent's step labels
// speak of a call the same way.

// CallTarget is what a call of tool works on, for a one-line header:
// exec's command line, a file tool's path, a git tool's repository and
// operation, the browser's URL or selector. It may span lines (a script);
// it is "" for an unknown tool, a tool without arguments to show, and
// arguments it cannot decode.
func CallTarget(tool string, args json.RawMessage) string {
	i, ok := toolIndex[tool]
	if !ok || len(args) == 0 || toolTable[i].target == nil {
		return ""
	}
	return toolTable[i].target(args)
}

// ResultSummary is the useful part of a successful result of tool, shown
// after "[ok]" in transcripts: what a read_file read, what a git call left
// checked out, where a browser went. It is "" for tools without one, and
// for a value it cannot decode.
func ResultSummary(tool string, value json.RawMessage) string {
	i, ok := toolIndex[tool]
	if !ok || len(value) == 0 || toolTable[i].summary == nil {
		return ""
	}
	return toolTable[i].summary(value)
}

// textOf makes a target or summary function of one that takes the decoded
// arguments or result; what does not decode as a T reads as "".
func textOf[T any](f func(T) string) func(json.RawMessage) string {
	return func(raw json.RawMessage) string {
		var v T
		if json.Unmarshal(raw, &v) != nil {
			return ""
		}
		return f(v)
	}
}

// ---- targets

func execTarget(a ExecArgs) string {
	if a.Command != "" || len(a.Argv) == 0 {
		return a.Command
	}
	q := make([]string, len(a.Argv))
	for i, s := range a.Argv {
		q[i] = shellQuote(s)
	}
	return strings.Join(q, " ")
}

// shellQuote quotes a word for sh when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func readFileTarget(a ReadFileArgs) string             { return a.Path }
func writeFileTarget(a WriteFileArgs) string           { return a.Path }
func editFileTarget(a EditFileArgs) string             { return a.Path }
func uploadArtifactTarget(a UploadArtifactArgs) string { return a.Path }

func listDirTarget(a ListDirArgs) string {
	if a.Path == "" {
		return "."
	}
	return a.Path
}

func globTarget(a GlobArgs) string { return a.Pattern }

func grepTarget(a GrepArgs) string {
	if a.Path != "" {
		return a.Pattern + " in " + a.Path
	}
	return a.Pattern
}

func applyPatchTarget(a ApplyPatchArgs) string { return strings.Join(patchFiles(a.Patch), ", ") }

// patchFiles are the files a unified diff writes.
func patchFiles(patch string) []string {
	var files []string
	for _, l := range strings.Split(patch, "\n") {
		if !strings.HasPrefix(l, "+++ ") {
			continue
		}
		p, _, _ := strings.Cut(strings.TrimSpace(l[4:]), "\t")
		if p == "/dev/null" {
			continue
		}
		files = append(files, strings.TrimPrefix(p, "b/"))
	}
	return files
}

func shellRunTarget(a ShellRunArgs) string             { return "[" + a.Name + "] " + a.Command }
func shellWriteTarget(a ShellWriteArgs) string         { return "[" + a.Name + "] " + a.Text }
func shellStartTarget(a ShellStartArgs) string         { return a.Name }
func shellReadTarget(a ShellReadArgs) string           { return a.Name }
func shellInterruptTarget(a ShellInterruptArgs) string { return a.Name }
func shellKillTarget(a ShellKillArgs) string           { return a.Name }

func gitCloneTarget(a GitCloneArgs) string {
	t := a.Name + " ← " + a.URL
	if a.Ref != "" {
		t += " @ " + a.Ref
	}
	return t
}

func gitStatusTarget(a GitStatusArgs) string     { return a.Repo }
func gitDiffTarget(a GitDiffArgs) string         { return a.Repo }
func gitCheckoutTarget(a GitCheckoutArgs) string { return a.Repo + " → " + a.Ref }
func gitCommitTarget(a GitCommitArgs) string     { return a.Repo + ": " + a.Message }

func gitPushTarget(a GitPushArgs) string {
	remote := a.Remote
	if remote == "" {
		remote = "origin"
	}
	if a.Branch != "" {
		remote += "/" + a.Branch
	}
	return a.Repo + " → " + remote
}

func browserNavigateTarget(a BrowserNavigateArgs) string     { return a.URL }
func browserClickTarget(a BrowserClickArgs) string           { return a.Selector }
func browserTypeTarget(a BrowserTypeArgs) string             { return a.Selector }
func browserTextTarget(a BrowserTextArgs) string             { return a.Selector }
func browserPressTarget(a BrowserPressArgs) string           { return a.Key }
func browserEvalTarget(a BrowserEvalArgs) string             { return a.Expression }
func browserScreenshotTarget(a BrowserScreenshotArgs) string { return a.Name }
func recordStartTarget(a RecordStartArgs) string             { return a.Name }

func computerTarget(a ComputerArgs) string {
	switch {
	case len(a.Region) == 4:
		return fmt.Sprintf("%s %v", a.Action, a.Region)
	case len(a.Coordinate) == 2:
		return fmt.Sprintf("%s %d,%d", a.Action, a.Coordinate[0], a.Coordinate[1])
	case a.Text != "" && a.Action != ComputerType:
		return a.Action + " " + a.Text
	}
	return a.Action
}

// ---- summaries

func readFileSummary(r ReadFileResult) string {
	lines := countLines(r.Content)
	if r.TotalLines > 0 {
		return fmt.Sprintf("%s of %d, %s file", plural(lines, "line"), r.TotalLines, ByteSize(r.Size))
	}
	return fmt.Sprintf("%s, %s", plural(lines, "line"), ByteSize(r.Size))
}

func writeFileSummary(r WriteFileResult) string { return "wrote " + ByteSize(r.Bytes) }

func editFileSummary(r EditFileResult) string {
	if r.Line > 0 {
		return fmt.Sprintf("changed at line %d", r.Line)
	}
	return ""
}

func applyPatchSummary(r ApplyPatchResult) string { return listSummary(r.Files, "file") }
func listDirSummary(r ListDirResult) string       { return plural(len(r.Entries), "entry") }

func globSummary(r GlobResult) string {
	return plural(len(r.Matches), "match") + truncatedText(r.Truncated)
}

func grepSummary(r GrepResult) string {
	return plural(len(r.Matches), "match") + truncatedText(r.Truncated)
}

func gitCloneSummary(r GitCloneResult) string {
	s := orDash(r.Path) + " at " + shortCommit(r.Head)
	if r.Reused {
		s += " (reused)"
	}
	return s
}

func gitStatusSummary(r GitStatusResult) string {
	s := branchAt(r.Branch, r.Head)
	if r.Clean {
		return s + ", clean"
	}
	return s + ", " + plural(len(r.Files), "changed file") + truncatedText(r.Truncated)
}

func gitCheckoutSummary(r GitCheckoutResult) string { return branchAt(r.Branch, r.Head) }

func gitCommitSummary(r GitCommitResult) string {
	return "commit " + shortCommit(r.Commit) + onBranch(r.Branch)
}

func gitPushSummary(r GitPushResult) string {
	return fmt.Sprintf("pushed %s (%s) to %s", r.Branch, shortCommit(r.Commit), r.Remote)
}

func gitDiffSummary(r GitDiffResult) string {
	if r.Bytes == 0 {
		return "no changes"
	}
	return ByteSize(r.Bytes) + " of diff" + truncatedText(r.Truncated)
}

func browserNavigateSummary(r BrowserNavigateResult) string {
	if r.Title == "" {
		return r.URL
	}
	return fmt.Sprintf("%q at %s", truncate(r.Title, 80), truncate(r.URL, 200))
}

func browserTextSummary(r BrowserTextResult) string {
	return plural(len([]rune(r.Text)), "character") + truncatedText(r.Truncated)
}

func browserConsoleSummary(r BrowserConsoleResult) string { return plural(len(r.Messages), "message") }

// browserFileSummary describes a screenshot or recording.
func computerSummary(r ComputerResult) string {
	switch {
	case len(r.Coordinate) == 2:
		return fmt.Sprintf("pointer at %d,%d", r.Coordinate[0], r.Coordinate[1])
	case r.Image != nil:
		return fmt.Sprintf("screenshot %d×%d", r.Width, r.Height)
	}
	return ""
}

func browserFileSummary(r BrowserFileResult) string {
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
	parts = append(parts, ByteSize(r.Size))
	return strings.Join(parts, ", ")
}

func recordStartSummary(r RecordStartResult) string {
	if r.Path == "" {
		return ""
	}
	return "recording to " + path.Base(r.Path)
}

func uploadArtifactSummary(r ArtifactRef) string {
	if r.Name == "" {
		return ""
	}
	return fmt.Sprintf("artifact %s, %s", r.Name, ByteSize(r.Size))
}

func shellStartSummary(r ShellStartResult) string {
	return fmt.Sprintf("shell %s (%s, pid %d)", r.Name, r.Shell, r.PID)
}

func shellRunSummary(r ShellRunResult) string {
	if r.Running {
		return "still running"
	}
	return fmt.Sprintf("exit %d", r.ExitCode)
}

// ---- words

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

// ByteSize is a size for people in the largest binary unit that keeps it
// at least 1: "812 B", "1.2 KiB", "3.4 MiB". The CLI, the web UI, the
// server's messages and doctor all write sizes with it.
func ByteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate cuts s to n characters, the last of them "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func networkRequestTarget(a NetworkAccessRequestArgs) string { return strings.Join(a.Domains, ", ") }

func networkRequestSummary(r NetworkAccessResult) string {
	if !r.Granted {
		if r.Reason != "" {
			return "denied: " + r.Reason
		}
		return "denied"
	}
	return "granted for the " + r.Scope
}
