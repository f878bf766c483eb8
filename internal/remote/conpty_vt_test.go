package remote

import "testing"

// TestVTCleaner: a pseudo console's output, as Wine's conhost rendered
// cmd.exe, becomes its text, also when a sequence or a CR LF is split
// between reads.
func TestVTCleaner(t *testing.T) {
	raw := "\x1b[2J\x1b[m\x1b[H\x1b]0;C:\\windows\\system32\\cmd.exe\a" +
		"\x1b[?25lecho hi & set X=5\r\n\x1b[?25h" +
		"\x1b[?25lhi\x1b[K\x1b[2C\x1b[?25h\r\n" +
		"\x1b(Ba\rb\x1b]0;title\x1b\\c\x1b[1;32mgreen\x1b[0m\r\n"
	want := "echo hi & set X=5\nhi  \nabcgreen\n"
	for split := 0; split <= len(raw); split++ {
		var v vtCleaner
		got := string(v.clean([]byte(raw[:split]))) + string(v.clean([]byte(raw[split:])))
		if got != want {
			t.Fatalf("split at %d: %q, want %q", split, got, want)
		}
	}
	var v vtCleaner
	if got := string(v.clean([]byte("x\x1b[12"))); got != "x" || string(v.pending) != "\x1b[12" {
		t.Fatalf("an incomplete sequence: %q, pending %q", got, v.pending)
	}
}
