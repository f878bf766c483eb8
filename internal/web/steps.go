package web

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
)

// This file says what a step of the session page shows of its call: the
// header's target and duration, and the arguments and values its body
// shows. static/app.js has the same rules for live steps.

// tookText says how long a call took, as a CI log does: 340ms, 4.2s, 37s,
// 2m 5s, 1h 3m.
func tookText(ms int64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%dms", ms)
	case ms < 10_000:
		return fmt.Sprintf("%d.%ds", ms/1000, ms%1000/100)
	case ms < 60_000:
		return fmt.Sprintf("%ds", ms/1000)
	case ms < 3_600_000:
		return fmt.Sprintf("%dm %ds", ms/60_000, ms%60_000/1000)
	}
	return fmt.Sprintf("%dh %dm", ms/3_600_000, ms%3_600_000/60_000)
}

// targetArgs are the arguments step headers show, of every tool.
type targetArgs struct {
	Command    string   `json:"command"`
	Argv       []string `json:"argv"`
	Path       string   `json:"path"`
	URL        string   `json:"url"`
	Name       string   `json:"name"`
	Repo       string   `json:"repo"`
	Ref        string   `json:"ref"`
	Message    string   `json:"message"`
	Remote     string   `json:"remote"`
	Branch     string   `json:"branch"`
	Pattern    string   `json:"pattern"`
	Selector   string   `json:"selector"`
	Key        string   `json:"key"`
	Text       string   `json:"text"`
	Expression string   `json:"expression"`
	Patch      string   `json:"patch"`
}

// stepTarget is what a call works on, for its header: exec's command line,
// a file tool's path, a git tool's repository and operation, the browser's
// URL or selector.
func stepTarget(tool string, raw json.RawMessage) string {
	var a targetArgs
	if len(raw) == 0 || json.Unmarshal(raw, &a) != nil {
		return ""
	}
	switch tool {
	case api.ToolExec:
		return execLine(a)
	case api.ToolShellRun:
		return "[" + a.Name + "] " + a.Command
	case api.ToolShellWrite:
		return "[" + a.Name + "] " + a.Text
	case api.ToolShellStart, api.ToolShellRead, api.ToolShellInterrupt, api.ToolShellKill:
		return a.Name
	case api.ToolListDir:
		if a.Path == "" {
			return "."
		}
		return a.Path
	case api.ToolReadFile, api.ToolWriteFile, api.ToolEditFile, api.ToolUploadArtifact:
		return a.Path
	case api.ToolGlob:
		return a.Pattern
	case api.ToolGrep:
		if a.Path != "" {
			return a.Pattern + " in " + a.Path
		}
		return a.Pattern
	case api.ToolApplyPatch:
		return strings.Join(patchFiles(a.Patch), ", ")
	case api.ToolGitClone:
		t := a.Name + " ← " + a.URL
		if a.Ref != "" {
			t += " @ " + a.Ref
		}
		return t
	case api.ToolGitStatus, api.ToolGitDiff:
		return a.Repo
	case api.ToolGitCheckout:
		return a.Repo + " → " + a.Ref
	case api.ToolGitCommit:
		return a.Repo + ": " + a.Message
	case api.ToolGitPush:
		remote := a.Remote
		if remote == "" {
			remote = "origin"
		}
		if a.Branch != "" {
			remote += "/" + a.Branch
		}
		return a.Repo + " → " + remote
	case api.ToolBrowserNavigate:
		return a.URL
	case api.ToolBrowserClick, api.ToolBrowserType, api.ToolBrowserText:
		return a.Selector
	case api.ToolBrowserPress:
		return a.Key
	case api.ToolBrowserEval:
		return a.Expression
	case api.ToolBrowserScreenshot, api.ToolRecordStart:
		return a.Name
	}
	return ""
}

// execCommand is exec's command line, whole.
func execCommand(raw json.RawMessage) string {
	var a targetArgs
	if json.Unmarshal(raw, &a) != nil {
		return ""
	}
	return execLine(a)
}

func execLine(a targetArgs) string {
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

// targetMax is how many characters of a target a header shows.
const targetMax = 160

// oneLine cuts a target to its first line and targetMax characters; full
// is the whole target when it was cut.
func oneLine(s string) (line, full string) {
	line = s
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = strings.TrimRight(line[:i], "\r") + " …"
	}
	if utf8.RuneCountInString(line) > targetMax {
		line = string([]rune(line)[:targetMax]) + "…"
	}
	if line != s {
		full = s
	}
	return line, full
}

// stepArgs are the arguments a step's body shows: write_file's content as
// text, and for tools whose header shows one argument, the others.
func stepArgs(tool string, raw json.RawMessage) (args, content string) {
	if len(raw) == 0 {
		return "", ""
	}
	switch tool {
	case api.ToolExec, api.ToolEditFile, api.ToolApplyPatch:
		return "", ""
	case api.ToolWriteFile:
		var a api.WriteFileArgs
		_ = json.Unmarshal(raw, &a)
		return "", a.Content
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil && len(m) <= 1 {
		return "", ""
	}
	return prettyJSON(raw), ""
}

// patchDiff is apply_patch's patch, classed for colour.
func patchDiff(args json.RawMessage) []diffLine {
	var a api.ApplyPatchArgs
	if json.Unmarshal(args, &a) != nil || a.Patch == "" {
		return nil
	}
	return splitDiff(a.Patch)
}

// valueText is the text of a result whose value is mostly one text:
// read_file's content, browser_text's text.
func valueText(tool string, value json.RawMessage) (string, bool) {
	var v struct {
		Content *string `json:"content"`
		Text    *string `json:"text"`
	}
	if json.Unmarshal(value, &v) != nil {
		return "", false
	}
	switch {
	case tool == api.ToolReadFile && v.Content != nil:
		return *v.Content, true
	case tool == api.ToolBrowserText && v.Text != nil:
		return *v.Text, true
	}
	return "", false
}
