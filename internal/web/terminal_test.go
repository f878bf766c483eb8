package web

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// terminalCase is one case of testdata/terminal.json, which the e2e tests
// also run through static/terminal.js in Chromium.
type terminalCase struct {
	Name   string `json:"name"`
	Chunks []struct {
		Text   string `json:"text"`
		Stream string `json:"stream"`
	} `json:"chunks"`
	HTML string `json:"html"`
}

func terminalCases(t *testing.T) []terminalCase {
	t.Helper()
	b, err := os.ReadFile("testdata/terminal.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []terminalCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func TestTerminal(t *testing.T) {
	t.Parallel()
	for _, tc := range terminalCases(t) {
		term := newTerminal()
		for _, c := range tc.Chunks {
			term.write(c.Text, c.Stream == "stderr")
		}
		if got := term.html(); got != tc.HTML {
			t.Errorf("%s:\n got %q\nwant %q", tc.Name, got, tc.HTML)
		}
	}
}

// TestTerminalByteByByte: output cut anywhere renders as if it came whole.
func TestTerminalByteByByte(t *testing.T) {
	t.Parallel()
	for _, tc := range terminalCases(t) {
		term := newTerminal()
		for _, c := range tc.Chunks {
			for i := range len(c.Text) {
				term.write(c.Text[i:i+1], c.Stream == "stderr")
			}
		}
		if got := term.html(); got != tc.HTML {
			t.Errorf("%s, a byte at a time:\n got %q\nwant %q", tc.Name, got, tc.HTML)
		}
	}
}

// TestTerminalNeverEmitsMarkup feeds hostile output and checks that every
// tag in the HTML is one of the renderer's own spans.
func TestTerminalNeverEmitsMarkup(t *testing.T) {
	t.Parallel()
	term := newTerminal()
	for _, s := range []string{"<script>alert(1)</script>", "\x1b[31m<img src=x onerror=alert(1)>", "\x1b]8;;javascript:alert(1)\x1b\\<a>",
		"\x1b[38;5;\"><script>m", "</span><script>", "\x1b[3\"1m", "&lt;"} {
		term.write(s, false)
		term.write(s, true)
	}
	out := term.html()
	for rest := out; ; {
		i := strings.IndexByte(rest, '<')
		if i < 0 {
			break
		}
		rest = rest[i:]
		if !strings.HasPrefix(rest, `<span class="`) && !strings.HasPrefix(rest, `</span>`) {
			t.Fatalf("the HTML has markup of its own: %q in %q", rest[:min(len(rest), 30)], out)
		}
		rest = rest[1:]
	}
	if strings.Contains(out, "<script") || strings.Contains(out, "<img") {
		t.Fatalf("unescaped: %q", out)
	}
}

func TestTerminalState(t *testing.T) {
	t.Parallel()
	term := newTerminal()
	term.write("\x1b[1;31mred \x1b[4", false)
	if got, want := term.state(), `{"fg":1,"bg":-1,"a":1,"p":"\u001b[4"}`; got != want {
		t.Errorf("state %s, want %s", got, want)
	}
	term.write("m\r", false)
	if got, want := term.state(), `{"fg":1,"bg":-1,"a":9,"cr":true}`; got != want {
		t.Errorf("state %s, want %s", got, want)
	}
}

func TestNearest256(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ r, g, b, want int }{
		{0, 0, 0, 16}, {255, 255, 255, 231}, {255, 0, 0, 196}, {0, 0, 255, 21},
		{128, 128, 128, 244}, {8, 8, 8, 232}, {238, 238, 238, 255}, {95, 135, 175, 67},
	} {
		if got := nearest256(tc.r, tc.g, tc.b); got != tc.want {
			t.Errorf("nearest256(%d, %d, %d) = %d, want %d", tc.r, tc.g, tc.b, got, tc.want)
		}
	}
}
