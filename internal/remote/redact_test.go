package remote

import (
	"encoding/json"
	"strings"
	"testing"
)

// redactChunks streams chunks through a fresh redactor.
func redactChunks(set *secretSet, chunks ...string) string {
	r := newRedactor(set)
	var b strings.Builder
	for _, c := range chunks {
		b.Write(r.Write([]byte(c)))
	}
	b.Write(r.Flush())
	return b.String()
}

func TestRedactorEverySplitPoint(t *testing.T) {
	set := newSecretSet(map[string]string{"TOKEN": "hunter2-abc", "KEY": "k3y"})
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
	set := newSecretSet(map[string]string{"SHORT": "abc", "LONG": "abcdef", "REP": "aab"})
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
	r := newRedactor(newSecretSet(map[string]string{"S": "secret"}))
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
	set := newSecretSet(map[string]string{"Q": `pa"ss<word>`})
	raw, _ := json.Marshal(map[string]any{"content": `x pa"ss<word> y`, "n": 12345678901234567, "list": []string{`pa"ss<word>`}})
	got := string(set.redactJSON(raw))
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

func TestOutboxDropsBeyondLimit(t *testing.T) {
	o := newOutbox()
	chunk := make([]byte, 1<<20)
	for range 9 {
		o.pushOutput(1, "stdout", chunk)
	}
	o.pushResult(1)
	var data, markers int
	var sawResult bool
	for {
		it, ok := o.pop()
		if !ok {
			break
		}
		switch {
		case it.output == nil:
			sawResult = true
		case string(it.output.Data) == dropMarker:
			markers++
		default:
			if len(it.output.Data) > maxChunk {
				t.Fatalf("chunk of %d bytes", len(it.output.Data))
			}
			data += len(it.output.Data)
		}
	}
	if data != maxBuffered || markers != 1 || !sawResult {
		t.Errorf("data=%d markers=%d result=%v", data, markers, sawResult)
	}
	if o.bytes != 0 {
		t.Errorf("bytes = %d after draining", o.bytes)
	}
}
