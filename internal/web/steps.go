package web

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
)

// This file says what a step of the session page shows of its call: the
// header's duration, and the arguments and values its body shows. The
// header's target is api.CallTarget's, for live steps too (stepevents.go).

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
