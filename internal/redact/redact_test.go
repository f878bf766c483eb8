package redact

import (
	"encoding/json"
	"strings"
	"testing"
)

// redactChunks streams chunks through a fresh Stream.
func redactChunks(set *Set, chunks ...string) string {
	r := NewStream(set)
	var b strings.Builder
	for _, c := range chunks {
		b.Write(r.Write([]byte(c)))
	}
	b.Write(r.Flush())
	return b.String()
}

func TestRedactorEverySplitPoint(t *testing.T) {
	set := NewSet(map[string]string{"TOKEN": "hunter2-abc", "KEY": "k3y"})
	in := "a hunter2-abc b k3y c hunter2-ab hunter2-abc"
	want := "a [REDACTED:TOKEN] b [REDACTED:KEY] c hunter2-ab [REDACTED:TOKEN]"
	if got := redactChunks(set, in); got != want {
		t.Fatalf("one chunk: %q, want %q", got, want)
	}
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			if got := redactChunks(set, in[:i], in[i:j], in[j:]); got != want {
				t.Fatalf("split at %d,%d: %q, want %q", i, j, got, want)
			}
		}
	}
	// Byte by byte.
	var chunks []string
	for i := range len(in) {
		chunks = append(chunks, in[i:i+1])
	}
	if got := redactChunks(set, chunks...); got != want {
		t.Fatalf("byte by byte: %q", got)
	}
}

func TestRedactorOverlappingSecrets(t *testing.T) {
	set := NewSet(map[string]string{"SHORT": "abc", "LONG": "abcdef", "REP": "aab"})
	cases := map[string]string{
		"abcdef":    "[REDACTED:LONG]",
		"abcde":     "[REDACTED:SHORT]de",
		"xabcx":     "x[REDACTED:SHORT]x",
		"aaab":      "a[REDACTED:REP]",
		"abcabcdef": "[REDACTED:SHORT][REDACTED:LONG]",
		"aabcdef":   "[REDACTED:REP][REDACTED:LONG]",
		"aabcx":     "[REDACTED:REP][REDACTED:SHORT]x",
	}
	for in, want := range cases {
		for i := 0; i <= len(in); i++ {
			if got := redactChunks(set, in[:i], in[i:]); got != want {
				t.Errorf("%q split at %d: %q, want %q", in, i, got, want)
			}
		}
	}
}

func TestRedactorHoldsBackOnlyPossibleSecrets(t *testing.T) {
	r := NewStream(NewSet(map[string]string{"S": "secret"}))
	if got := string(r.Write([]byte("plain text se"))); got != "plain text " {
		t.Errorf("first write = %q", got)
	}
	if got := string(r.Write([]byte("cret!"))); got != "[REDACTED:S]!" {
		t.Errorf("second write = %q", got)
	}
	if got := string(r.Write([]byte("sec"))); got != "" {
		t.Errorf("third write = %q", got)
	}
	if got := string(r.Flush()); got != "sec" {
		t.Errorf("flush = %q", got)
	}
	if got := redactChunks(nil, "no secrets"); got != "no secrets" {
		t.Errorf("nil set: %q", got)
	}
}

func TestRedactJSON(t *testing.T) {
	set := NewSet(map[string]string{"Q": `pa"ss<word>`})
	raw, _ := json.Marshal(map[string]any{"content": `x pa"ss<word> y`, "n": 12345678901234567, "list": []string{`pa"ss<word>`}})
	got := string(set.JSON(raw))
	if strings.Contains(got, "pa") || !strings.Contains(got, "12345678901234567") {
		t.Errorf("redacted = %s", got)
	}
	var v struct {
		Content string   `json:"content"`
		List    []string `json:"list"`
	}
	if err := json.Unmarshal([]byte(got), &v); err != nil {
		t.Fatal(err)
	}
	if v.Content != "x [REDACTED:Q] y" || v.List[0] != "[REDACTED:Q]" {
		t.Errorf("decoded = %+v", v)
	}
}

func TestRedactJSONUnchanged(t *testing.T) {
	set := NewSet(map[string]string{"Q": "hunter2"})
	for _, raw := range []string{`{ "b": 1,  "a": "x<y" }`, `[1, 2.50, "z"]`, `"plain"`} {
		if got := string(set.JSON(json.RawMessage(raw))); got != raw {
			t.Errorf("JSON(%s) = %s, want it unchanged", raw, got)
		}
	}
	// Not one JSON document: redacted as text, nothing dropped.
	if got := string(set.JSON(json.RawMessage(`{"a":1} {"b":"hunter2"}`))); got != `{"a":1} {"b":"[REDACTED:Q]"}` {
		t.Errorf("two documents = %s", got)
	}
	// A value hidden behind JSON escapes is still found.
	if got := string(set.JSON(json.RawMessage(`{"cmd":"echo hunter\u0032"}`))); strings.Contains(got, "hunter") {
		t.Errorf("escaped = %s", got)
	}
	var nilSet *Set
	if got := nilSet.String("hunter2"); got != "hunter2" {
		t.Errorf("nil set = %q", got)
	}
}

// TestFolded: a folded set redacts each secret as it is and lower-cased,
// under its own name; the set it came from is unchanged.
func TestFolded(t *testing.T) {
	s := NewSet(map[string]string{"A": "AbC1", "B": "lower", "C": "AbC1xYz"})
	f := s.Folded()
	for in, want := range map[string]string{
		"x.abc1.y":    "x.[REDACTED:A].y",
		"x.AbC1.y":    "x.[REDACTED:A].y",
		"abc1xyz.t":   "[REDACTED:C].t",
		"lower.t":     "[REDACTED:B].t",
		"abc.nothing": "abc.nothing",
	} {
		if got := f.String(in); got != want {
			t.Errorf("Folded().String(%q) = %q, want %q", in, got, want)
		}
	}
	if got := s.String("x.abc1.y"); got != "x.abc1.y" {
		t.Errorf("the original set now redacts lower case: %q", got)
	}
	if (*Set)(nil).Folded() != nil {
		t.Error("a nil set folds to a set")
	}
}
