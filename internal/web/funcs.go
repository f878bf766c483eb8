package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/api"
)

var funcs = template.FuncMap{
	"unix": func(v int64) string {
		if v == 0 {
			return ""
		}
		return time.Unix(v, 0).UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"unixp": func(v *int64) string {
		if v == nil {
			return ""
		}
		return time.Unix(*v, 0).UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"ms": func(v int64) string {
		return time.UnixMilli(v).UTC().Format("15:04:05")
	},
	"plain":     plainStatus,
	"ansi":      ansiHTML,
	"pretty":    prettyJSON,
	"diffLines": diffLines,
	"join":      strings.Join,
	"has":       func(list []string, s string) bool { return slices.Contains(list, s) },
	"okText": func(ok *bool) string {
		if ok == nil {
			return ""
		}
		if *ok {
			return "ok"
		}
		return "failed"
	},
	"intp": func(v *int) string {
		if v == nil {
			return ""
		}
		return strconv.Itoa(*v)
	},
	"size": func(n int64) string {
		switch {
		case n >= 1<<20:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		case n >= 1<<10:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		}
		return fmt.Sprintf("%d B", n)
	},
}

// plainStatus says a session status in plain words.
func plainStatus(status, detail string) string {
	switch status {
	case api.StatusNew:
		return "Waiting in the queue for a machine"
	case api.StatusClaimed:
		return "Claimed by a machine, starting"
	case api.StatusRunning:
		switch detail {
		case api.DetailWaitingForUser:
			return "Waiting for your message"
		case api.DetailWaitingForMachine:
			return "Waiting for its machine to reconnect"
		}
		return "Running"
	case api.StatusSuspended:
		return "Suspended"
	case api.StatusResuming:
		return "Resuming"
	case api.StatusExit:
		switch detail {
		case api.DetailFinished:
			return "Finished"
		case api.DetailUserRequest:
			return "Terminated by a user"
		case api.DetailInactivity:
			return "Ended after waiting too long"
		case api.DetailUsageLimitExceeded:
			return "Ended: usage limit reached"
		case api.DetailOutpostDeleted:
			return "Ended: its outpost was deleted"
		}
		return "Ended"
	case api.StatusError:
		return "Failed"
	}
	if status == "" {
		return "Unknown"
	}
	return status
}

// prettyJSON indents raw JSON, or returns it as is when it is not JSON.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// ansiRE matches CSI escape sequences and other lone escapes.
var ansiRE = regexp.MustCompile("\x1b\\[([0-9;?]*)([A-Za-z])|\x1b[^\\[]?")

// ansiHTML renders terminal output as HTML: every character of the text is
// escaped first; SGR colour codes become spans with fixed class names, and
// every other escape sequence is dropped.
func ansiHTML(text string) template.HTML {
	var b strings.Builder
	fg, bold, open := -1, false, false
	pos := 0
	flush := func(s string) {
		if s == "" {
			return
		}
		if fg >= 0 || bold {
			cls := []string{}
			if fg >= 0 {
				cls = append(cls, "fg"+strconv.Itoa(fg))
			}
			if bold {
				cls = append(cls, "b")
			}
			b.WriteString(`<span class="` + strings.Join(cls, " ") + `">`)
			open = true
		}
		b.WriteString(html.EscapeString(s))
		if open {
			b.WriteString("</span>")
			open = false
		}
	}
	for _, m := range ansiRE.FindAllStringSubmatchIndex(text, -1) {
		flush(text[pos:m[0]])
		pos = m[1]
		if m[4] < 0 || text[m[4]:m[5]] != "m" {
			continue
		}
		params := text[m[2]:m[3]]
		if params == "" {
			params = "0"
		}
		for _, p := range strings.Split(params, ";") {
			n, err := strconv.Atoi(p)
			if err != nil {
				continue
			}
			switch {
			case n == 0:
				fg, bold = -1, false
			case n == 1:
				bold = true
			case n == 22:
				bold = false
			case n >= 30 && n <= 37:
				fg = n - 30
			case n >= 90 && n <= 97:
				fg = n - 90 + 8
			case n == 39:
				fg = -1
			}
		}
	}
	flush(text[pos:])
	return template.HTML(b.String()) //nolint:gosec // every piece of text went through html.EscapeString
}

// diffLine is one line of a rendered diff.
type diffLine struct{ Class, Text string }

// diffLines returns the lines of the unified diff a result value carries
// (edit_file's "diff"), classed for colour, or nil.
func diffLines(raw json.RawMessage) []diffLine {
	var v struct {
		Diff string `json:"diff"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v.Diff == "" {
		return nil
	}
	var out []diffLine
	for _, l := range strings.Split(strings.TrimSuffix(v.Diff, "\n"), "\n") {
		c := ""
		switch {
		case strings.HasPrefix(l, "@@"):
			c = "hunk"
		case strings.HasPrefix(l, "+"):
			c = "add"
		case strings.HasPrefix(l, "-"):
			c = "del"
		}
		out = append(out, diffLine{c, l})
	}
	return out
}
