package web

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// This file renders terminal output — text with ANSI escape sequences —
// as HTML for the session page. static/terminal.js is the same renderer
// for live output; testdata/terminal.json holds the cases both must pass.
//
// Colours and attributes (SGR) become spans with fixed class names, never
// inline styles (the page's CSP allows none): fg0–fg255 and bg0–bg255 for
// colours (16–255 are the xterm palette, truecolour maps to the nearest of
// them), b, d, i, u, s for bold, dim, italic, underline and strike,
// fgr/bgr for reversed default colours, se for standard error. Every other
// escape sequence (cursor moves, erase, OSC titles and links, …) and every
// other control character is dropped. A carriage return that is not part
// of CRLF starts its line again, as a progress bar expects. A sequence cut
// between two chunks is completed by the next chunk.

// Longest escape sequences kept whole; longer ones are malformed output.
const (
	maxCSI    = 128
	maxString = 4096
)

// run is text of one class.
type run struct {
	class string
	text  []byte
}

// terminal turns a stream of output chunks into HTML.
type terminal struct {
	st      sgr
	pending string // an escape sequence cut at the end of the last chunk
	cr      bool   // the last chunk ended in a carriage return
	runs    []run

	classKey   sgr // class caches the class of classKey and classErr
	classErr   bool
	class      string
	classValid bool
}

func newTerminal() *terminal { return &terminal{st: sgr{FG: -1, BG: -1}} }

// write adds a chunk of output; stderr marks it as standard error.
func (t *terminal) write(text string, stderr bool) {
	if text == "" {
		return
	}
	if t.pending != "" {
		text = t.pending + text
		t.pending = ""
	}
	if t.cr {
		t.cr = false
		if text[0] != '\n' {
			t.dropLine()
		}
	}
	start := 0 // start of the plain text not yet added
	for i := 0; i < len(text); {
		c := text[i]
		if c >= 0x20 && c != 0x7f || c == '\n' || c == '\t' {
			i++
			continue
		}
		t.add(text[start:i], stderr)
		switch c {
		case 0x1b:
			n := escLen(text[i:])
			if n < 0 {
				t.pending = text[i:]
				return
			}
			if seq := text[i : i+n]; n > 2 && seq[1] == '[' && seq[n-1] == 'm' {
				t.st.apply(seq[2 : n-1])
			}
			i += n
		case '\r':
			switch {
			case i+1 == len(text):
				t.cr = true
			case text[i+1] != '\n':
				t.dropLine()
			}
			i++
		default:
			i++
		}
		start = i
	}
	t.add(text[start:], stderr)
}

// add appends text in the current graphic state.
func (t *terminal) add(text string, stderr bool) {
	if text == "" {
		return
	}
	cls := t.classOf(stderr)
	if n := len(t.runs); n > 0 && t.runs[n-1].class == cls {
		t.runs[n-1].text = append(t.runs[n-1].text, text...)
		return
	}
	t.runs = append(t.runs, run{cls, []byte(text)})
}

// dropLine removes the text after the last newline.
func (t *terminal) dropLine() {
	for n := len(t.runs); n > 0; n = len(t.runs) {
		r := &t.runs[n-1]
		if i := bytes.LastIndexByte(r.text, '\n'); i >= 0 {
			r.text = r.text[:i+1]
			return
		}
		t.runs = t.runs[:n-1]
	}
}

// html is the output so far as HTML.
func (t *terminal) html() string {
	var b strings.Builder
	for _, r := range t.runs {
		if r.class == "" {
			writeEscaped(&b, r.text)
			continue
		}
		b.WriteString(`<span class="`)
		b.WriteString(r.class)
		b.WriteString(`">`)
		writeEscaped(&b, r.text)
		b.WriteString(`</span>`)
	}
	return b.String()
}

// writeEscaped writes text escaped for HTML, as html.EscapeString does.
func writeEscaped(b *strings.Builder, text []byte) {
	last := 0
	for i, c := range text {
		var esc string
		switch c {
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '&':
			esc = "&amp;"
		case '"':
			esc = "&#34;"
		case '\'':
			esc = "&#39;"
		default:
			continue
		}
		b.Write(text[last:i])
		b.WriteString(esc)
		last = i + 1
	}
	b.Write(text[last:])
}

// termState is what static/terminal.js needs to go on rendering the output
// of a running call where the page left off.
type termState struct {
	sgr
	Pending string `json:"p,omitempty"`
	CR      bool   `json:"cr,omitempty"`
}

// state is the terminal's state as JSON.
func (t *terminal) state() string {
	b, _ := json.Marshal(termState{t.st, t.pending, t.cr})
	return string(b)
}

// classOf is the class attribute of text in the current state.
func (t *terminal) classOf(stderr bool) string {
	if t.classValid && t.classKey == t.st && t.classErr == stderr {
		return t.class
	}
	t.classKey, t.classErr, t.classValid = t.st, stderr, true
	t.class = t.st.class(stderr)
	return t.class
}

func (s sgr) class(stderr bool) string {
	var parts []string
	fg, bg := s.FG, s.BG
	if s.Attrs&attrInverse != 0 {
		fg, bg = bg, fg
		if fg < 0 {
			parts = append(parts, "fgr")
		}
		if bg < 0 {
			parts = append(parts, "bgr")
		}
	}
	if fg >= 0 {
		parts = append(parts, "fg"+strconv.Itoa(fg))
	}
	if bg >= 0 {
		parts = append(parts, "bg"+strconv.Itoa(bg))
	}
	for _, a := range []struct {
		bit int
		cls string
	}{{attrBold, "b"}, {attrDim, "d"}, {attrItalic, "i"}, {attrUnderline, "u"}, {attrStrike, "s"}} {
		if s.Attrs&a.bit != 0 {
			parts = append(parts, a.cls)
		}
	}
	if stderr {
		parts = append(parts, "se")
	}
	return strings.Join(parts, " ")
}

// escLen is the length of the escape sequence s starts with (s[0] is
// ESC), or -1 when s ends inside it. A malformed sequence ends before the
// byte that broke it.
func escLen(s string) int {
	if len(s) < 2 {
		return -1
	}
	switch c := s[1]; {
	case c == '[': // CSI: parameter and intermediate bytes, then a final byte
		for j := 2; j < len(s); j++ {
			switch b := s[j]; {
			case b >= 0x40 && b <= 0x7e:
				return j + 1
			case b < 0x20 || b > 0x3f || j >= maxCSI:
				return j
			}
		}
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_': // a string, ended by BEL or ESC \
		for j := 2; j < len(s); j++ {
			switch {
			case j >= maxString:
				return 2
			case s[j] == 0x07:
				return j + 1
			case s[j] == 0x1b:
				if j+1 == len(s) {
					return -1
				}
				if s[j+1] == '\\' {
					return j + 2
				}
				return j
			}
		}
	case c >= 0x20 && c <= 0x2f: // intermediate bytes, then a final byte
		for j := 2; j < len(s); j++ {
			switch b := s[j]; {
			case b >= 0x30 && b <= 0x7e:
				return j + 1
			case b < 0x20 || b > 0x2f || j >= maxCSI:
				return j
			}
		}
	case c >= 0x30 && c <= 0x7e:
		return 2
	default:
		return 1
	}
	return -1
}
