package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/budget"
	"github.com/outpost-sh/outpost/internal/netpolicy"
)

var funcs = template.FuncMap{
	// networkPolicy shows an effective network policy in one line.
	"networkPolicy": func(p *api.NetworkPolicy) string {
		if p == nil || !p.Enabled {
			return "unrestricted"
		}
		if len(p.Allow) == 0 {
			return "nothing allowed"
		}
		rules := make([]string, len(p.Allow))
		for i, r := range p.Allow {
			rules[i] = netpolicy.Describe(r)
		}
		return "only " + strings.Join(rules, "; ")
	},
	// outpostDesktop shows an outpost's desktop setting in one line.
	"outpostDesktop": func(d *api.OutpostDesktop) string {
		size := "1280×800"
		if d != nil && d.Width > 0 {
			size = fmt.Sprintf("%d×%d", d.Width, d.Height)
		}
		switch {
		case d == nil:
			return "not set: its machines decide"
		case d.Enabled:
			return "every session gets one, " + size
		}
		return "not required; " + size + " where a machine gives one"
	},
	"policyRules": policyRules,
	// withCSRF hands the policy section the page's form value.
	"withCSRF": func(csrf string, ed policyEditor) policyEditor {
		ed.CSRF = csrf
		return ed
	},
	"inc": func(i int) int { return i + 1 },
	// gpus writes a machine's GPUs grouped by model ("2 × NVIDIA H200,
	// 140.4 GiB each"); "none" without.
	"gpus": gpusText,
	// labels writes a worker's labels as k=v, sorted; "—" without.
	"labels": labelsText,
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
	"plain": plainStatus,
	"raw":   rawHTML,
	"pre":   preText,
	"join":  strings.Join,
	// json is a value's JSON, for a data- attribute (the template escapes
	// it there).
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"requestText": func(r *api.NetworkRequest) string {
		if r == nil {
			return ""
		}
		return strings.TrimPrefix(netpolicy.RequestText(*r), "network request ")
	},
	"approvalText": approvalText,
	"msDate": func(v int64) string {
		return time.UnixMilli(v).UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"argsText": func(raw json.RawMessage) string {
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") != nil {
			return string(raw)
		}
		return b.String()
	},
	"has": func(list []string, s string) bool { return slices.Contains(list, s) },
	"okText": func(ok *bool) string {
		if ok == nil {
			return ""
		}
		if *ok {
			return "ok"
		}
		return "failed"
	},
	"workerCount": func(n int) string {
		if n < 0 {
			return "?"
		}
		return strconv.Itoa(n)
	},
	"progVersion": progVersion,
	"media":       mediaOf,
	"artMedia":    mediaFor,
	"duration":    sessionDuration,
	"usage":       budget.DescribeUsage,
	"budget":      budget.DescribeOutpost,
	"ago":         agoText,
	"size": func(n int64) string {
		switch {
		case n >= 1<<30:
			return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
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
		case api.DetailWaitingForApproval:
			return "Waiting for a person's approval"
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

// preText keeps a leading newline of a <pre> block's text, which the
// HTML parser would drop.
func preText(s string) string {
	if strings.HasPrefix(s, "\n") {
		return "\n" + s
	}
	return s
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
	// Go writes <, > and & in JSON strings as \u003c, \u003e, \u0026;
	// show them as the characters (the template escapes them for HTML).
	return htmlEscapesRE.ReplaceAllStringFunc(b.String(), func(m string) string {
		slashes := strings.Count(m, `\`)
		if slashes%2 == 0 { // an escaped backslash, then "u00…" as text
			return m
		}
		ch := map[string]string{"3c": "<", "3e": ">", "26": "&"}[strings.ToLower(m[len(m)-2:])]
		return m[:slashes-1] + ch
	})
}

// htmlEscapesRE matches \u003c, \u003e and \u0026 with the backslashes
// before them.
var htmlEscapesRE = regexp.MustCompile(`\\+u00(?:3[cCeE]|26)`)

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
	return splitDiff(v.Diff)
}

// splitDiff classes the lines of a unified diff for colour. The lines
// before a file's first hunk (diff --git, index, ---, +++) are its header.
func splitDiff(diff string) []diffLine {
	var out []diffLine
	header := true
	for _, l := range strings.Split(strings.TrimSuffix(diff, "\n"), "\n") {
		c := ""
		switch {
		case strings.HasPrefix(l, "diff "):
			c, header = "meta", true
		case strings.HasPrefix(l, "@@"):
			c, header = "hunk", false
		case header:
			c = "meta"
		case strings.HasPrefix(l, "+"):
			c = "add"
		case strings.HasPrefix(l, "-"):
			c = "del"
		}
		out = append(out, diffLine{c, l})
	}
	return out
}

// progVersion shortens a program's version line for a table cell:
// "git version 2.39.5" is "2.39.5", "ffmpeg version 5.1.9-0+deb12u1
// Copyright…" is "5.1.9-0+deb12u1", "Chromium 156.0.1 built on…" is
// "Chromium 156.0.1"; an empty one is "no".
func progVersion(line string) template.HTML {
	f := strings.Fields(line)
	if len(f) == 0 {
		return `<span class="no">no</span>`
	}
	out := strings.Join(f[:min(2, len(f))], " ")
	for i, w := range f {
		if w == "version" && i+1 < len(f) {
			out = f[i+1]
			break
		}
	}
	if len(out) > 40 {
		out = out[:40]
	}
	return template.HTML(`<span title="` + html.EscapeString(line) + `">` + html.EscapeString(out) + `</span>`) //nolint:gosec // escaped
}

// media is an artifact the session page shows inline.
type media struct {
	Name, ContentType string
	URL               string // through the UI, with the user's token
	Image, Video      bool
	// Shot: a computer tool's screenshot, shown as a thumbnail.
	Shot bool
}

// mediaOf returns the image or video artifact a tool result refers to:
// value.artifact of a browser_screenshot or record_stop result, or the
// value of an upload_artifact result. Names that are not valid artifact
// names are ignored.
func mediaOf(sessionID, tool string, raw json.RawMessage) *media {
	if len(raw) == 0 {
		return nil
	}
	var v struct {
		Artifact *api.ArtifactRef `json:"artifact"`
		api.ArtifactRef
	}
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	ref := v.Artifact
	if ref == nil && tool == api.ToolUploadArtifact {
		ref = &v.ArtifactRef
	}
	if ref == nil {
		return nil
	}
	return mediaFor(sessionID, ref.Name, ref.ContentType)
}

// mediaFor says how an artifact of a content type is shown inline, or nil.
func mediaFor(sessionID, name, contentType string) *media {
	if api.ValidateArtifactName(name) != nil || sessionID == "" {
		return nil
	}
	ct, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	ct = strings.TrimSpace(ct)
	m := &media{Name: name, ContentType: ct, URL: "/ui/sessions/" + url.PathEscape(sessionID) + "/artifacts/" + name}
	switch {
	case strings.HasPrefix(ct, "image/"):
		m.Image = true
	case ct == "video/webm" || ct == "video/mp4" || ct == "video/ogg":
		m.Video = true
	default:
		return nil
	}
	return m
}

// sessionDuration is how long a session ran: from its start to its end,
// or to now while it runs; "" before it started.
// agoText says how long before now a Unix time was: "12s ago", "5m ago",
// "3h ago", "2d ago"; "" for zero.
func agoText(unix int64) string {
	if unix == 0 {
		return ""
	}
	d := time.Since(time.Unix(unix, 0))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(int(d/time.Second), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
}

func sessionDuration(st api.SessionStatus) string {
	if st.StartedAt == nil {
		return ""
	}
	end := time.Now()
	if st.EndedAt != nil {
		end = time.Unix(*st.EndedAt, 0)
	}
	d := end.Sub(time.Unix(*st.StartedAt, 0)).Round(time.Second)
	if d < 0 {
		d = 0
	}
	if st.EndedAt == nil {
		return d.String() + " so far"
	}
	return d.String()
}

func gpusText(gpus []api.GPU) string {
	if len(gpus) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(gpus); {
		j := i
		for j < len(gpus) && gpus[j].Model == gpus[i].Model && gpus[j].MemoryBytes == gpus[i].MemoryBytes {
			j++
		}
		part := fmt.Sprintf("%d × %s", j-i, gpus[i].Model)
		if m := gpus[i].MemoryBytes; m > 0 {
			part += fmt.Sprintf(", %.1f GiB each", float64(m)/(1<<30))
		}
		parts = append(parts, part)
		i = j
	}
	return strings.Join(parts, "; ")
}

func labelsText(labels map[string]string) string {
	if len(labels) == 0 {
		return "—"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, " ")
}

// approvalText says an approval event's news in a line: the call, its
// state, who decided and why.
func approvalText(a *api.Approval) string {
	if a == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s", a.CallSeq, a.Tool)
	switch a.State {
	case api.ApprovalPending:
		fmt.Fprintf(&b, " waits for approval (rule %s", a.Rule)
		if a.RuleReason != "" {
			fmt.Fprintf(&b, ": %s", a.RuleReason)
		}
		b.WriteString(")")
	case api.ApprovalTimedOut:
		verb := "denied"
		if a.OnTimeout == api.ApprovalAllow {
			verb = "allowed"
		}
		fmt.Fprintf(&b, " timed out, so %s", verb)
	default:
		fmt.Fprintf(&b, " %s", a.State)
		switch a.By {
		case "":
		case "rule": // a deny rule's refusal
			fmt.Fprintf(&b, " by rule %s", a.Rule)
		default:
			fmt.Fprintf(&b, " by %s", a.By)
		}
	}
	if a.State != api.ApprovalPending && a.Reason != "" {
		fmt.Fprintf(&b, ": %s", a.Reason)
	}
	return b.String()
}
