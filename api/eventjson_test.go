package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// stdEncode is what a json.Encoder without HTML escaping writes, less the
// newline.
func stdEncode(t testing.TB, ev *Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// pieces are the building blocks of random strings: plain text and every
// kind of byte the encoders treat specially.
var pieces = []string{
	"a", "hello world ", "0123456789abcdef", strings.Repeat("x", 37), `"`, `\`, "/", "\n", "\r\n", "\t", "\b", "\f",
	"\x00", "\x01", "\x1f", "\x7f", " ", "<a&b>", "é", "日本語", "😀", "\u2028", "\u2029", "\uFFFD",
	"\xff", "\xc3", "\xe6\x97", "\xed\xa0\x80", "\xf0\x9f\x98", `\u00e9`, `\ud83d\ude00`, `\ud800`, "'",
}

func randString(r *rand.Rand) string {
	var b strings.Builder
	for n := r.IntN(12); n > 0; n-- {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randEvent(r *rand.Rand, scalarOnly bool) Event {
	s := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		return randString(r)
	}
	n := func() int64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return -r.Int64()
		default:
			return r.Int64N(1 << uint(r.IntN(62)+1))
		}
	}
	ev := Event{Seq: n(), SessionID: s(), Time: n(), Type: s(), Status: s(), StatusDetail: s(), Reason: s(),
		AcceptorID: s(), Role: s(), Seen: n(), CallSeq: n(), Tool: s(), Stream: s(), Text: s(), Spilled: r.IntN(2) == 0, DroppedBytes: n(),
		Error: s(), Step: s(), Machine: s(), Backend: s()}
	if !scalarOnly && r.IntN(2) == 0 {
		ok, code := r.IntN(2) == 0, r.IntN(3)
		ev.OK, ev.ExitCode, ev.Value, ev.Args = &ok, &code, json.RawMessage(`{"x": [1, "<y>"]}`), json.RawMessage(`[ ]`)
	}
	if !scalarOnly && r.IntN(2) == 0 {
		ev.Decision, ev.Host, ev.Address, ev.Protocol, ev.Rule = s(), s(), s(), s(), s()
		ev.Port, ev.BytesOut, ev.BytesIn, ev.Count = int(n()), n(), n(), n()
	}
	return ev
}

func TestAppendEventJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		ev := randEvent(r, i%4 != 0)
		got, err := AppendEventJSON([]byte("prefix"), &ev)
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]byte("prefix"), stdEncode(t, &ev)...); !bytes.Equal(got, want) {
			t.Fatalf("event %+v:\n got %s\nwant %s", ev, got, want)
		}
	}
	var zero Event
	if got, _ := AppendEventJSON(nil, &zero); !bytes.Equal(got, stdEncode(t, &zero)) {
		t.Fatalf("zero event: %s", got)
	}
}

// checkUnmarshal compares UnmarshalEvent with json.Unmarshal on data.
func checkUnmarshal(t testing.TB, data []byte) {
	t.Helper()
	var want, got Event
	werr := json.Unmarshal(data, &want)
	gerr := UnmarshalEvent(data, &got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: json.Unmarshal error %v, UnmarshalEvent error %v", data, werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", data, got, want)
	}
	// The fast path alone never accepts what encoding/json refuses, and
	// agrees with it when it accepts.
	var fast Event
	if decodeEventFast(data, &fast) {
		if werr != nil {
			t.Fatalf("%q: the fast path accepted what json.Unmarshal refuses (%v)", data, werr)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("%q: fast path\n got %+v\nwant %+v", data, fast, want)
		}
	}
}

func TestUnmarshalEventMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	fastHits := 0
	for i := range 20000 {
		ev := randEvent(r, i%4 != 0)
		data := stdEncode(t, &ev)
		checkUnmarshal(t, data)
		var fast Event
		if decodeEventFast(data, &fast) {
			fastHits++
		}
		// Mutations: JSON spelt differently, or broken.
		m := bytes.Clone(data)
		switch r.IntN(8) {
		case 0: // whitespace between tokens
			m = bytes.ReplaceAll(m, []byte(`,"`), []byte(" ,\n\t\"")) //nolint:gocritic
			m = bytes.ReplaceAll(m, []byte(`":`), []byte(`" : `))
			m = append(append([]byte(" \r\n"), m...), ' ')
		case 1: // a byte changed
			m[r.IntN(len(m))] = pieces[r.IntN(len(pieces))][0]
		case 2: // cut short
			m = m[:r.IntN(len(m))]
		case 3: // a key in capitals
			m = bytes.Replace(m, []byte(`"type"`), []byte(`"TYPE"`), 1)
		case 4: // an unknown field, or null
			m = bytes.Replace(m, []byte(`{`), []byte(`{"extra":null,"status":null,`), 1)
		case 5: // numbers spelt otherwise
			m = bytes.Replace(m, []byte(`"seq":`), []byte(`"seq":-0`), 1)
			m = bytes.Replace(m, []byte(`"time_ms":`), []byte(`"time_ms":1e3,"x":`), 1)
		case 6: // trailing data
			m = append(m, `{}`...)
		case 7: // escaped key, odd escapes
			m = bytes.Replace(m, []byte(`"text"`), []byte(`"te\u0078t"`), 1)
			m = bytes.Replace(m, []byte(`a`), []byte(`\'`), 1)
		}
		checkUnmarshal(t, m)
	}
	if fastHits < 10000 {
		t.Fatalf("only %d of 20000 events took the fast path", fastHits)
	}
	for _, s := range []string{`{}`, ` {} `, `{"seq":1}`, `{"seq":01}`, `{"seq":1.5}`, `{"seq":99999999999999999999}`,
		`{"seq":-}`, `{"spilled":true}`, `{"spilled":false,"spilled":true}`, `{"spilled":tru}`, `{"text":"a","text":"b"}`,
		`{"text":"\ud83d\ude00\ud800x\udc00"}`, `{"text":"\u12"}`, `{"text":"\x"}`, `{"text":"` + "\x01" + `"}`, `[]`, `null`, ``,
		`{"seq":1,}`, `{"seq" 1}`, `{"seq":1 "x":2}`, `{"text":"abc`, `{"text":"abc\`, `{"ok":true}`, `{"capabilities":null}`,
		`{"text":"` + strings.Repeat("abcdefgh", 100) + "\xff" + `"}`} {
		checkUnmarshal(t, []byte(s))
	}
}

func FuzzUnmarshalEvent(f *testing.F) {
	f.Add([]byte(`{"seq":0,"session_id":"s","time_ms":0,"type":"output","call_seq":1,"stream":"stdout","text":"a\nb","spilled":true}`))
	f.Add([]byte(`{"seq":3,"type":"result","ok":true,"value":{}}`))
	f.Add([]byte(`{"text":"\ud83d\ude00 \u2028 é"}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkUnmarshal(t, data) })
}

func TestPlainRun(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	naive := func(b []byte) int {
		for i, c := range b {
			if c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				return i
			}
		}
		return len(b)
	}
	for range 100000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = 'a'
			if r.IntN(20) == 0 {
				b[i] = byte(r.IntN(256))
			}
		}
		if got, want := plainRun(b), naive(b); got != want {
			t.Fatalf("plainRun(%q) = %d, want %d", b, got, want)
		}
		if got, want := plainRunString(string(b)), naive(b); got != want {
			t.Fatalf("plainRunString(%q) = %d, want %d", b, got, want)
		}
	}
}

// TestEventJSONKnowsEveryField fails when Event gains a field that the
// fast encoder would leave out: add it to AppendEventJSON (and
// decodeEventFast) or to the fields that take the slow path.
func TestEventJSONKnowsEveryField(t *testing.T) {
	known := map[string]bool{
		"Seq": true, "SessionID": true, "Time": true, "Type": true, "Status": true, "StatusDetail": true, "Reason": true,
		"AcceptorID": true, "Role": true, "Seen": true, "CallSeq": true, "Tool": true, "Stream": true, "Text": true,
		"Spilled": true, "DroppedBytes": true, "Error": true, "Step": true, "Machine": true, "Backend": true,
		// Slow path.
		"Capabilities": true, "ToolCalls": true, "Usage": true, "Args": true, "OK": true, "ExitCode": true, "Value": true, "Artifact": true,
		"Decision": true, "Host": true, "Address": true, "Port": true, "Protocol": true, "Rule": true,
		"BytesOut": true, "BytesIn": true, "Count": true, "NetworkRequest": true, "Approval": true, "Action": true, "Actor": true,
	}
	for f := range reflect.TypeFor[Event]().Fields() {
		if !known[f.Name] {
			t.Errorf("Event.%s is not handled by AppendEventJSON", f.Name)
		}
	}
}

func BenchmarkEventJSON(b *testing.B) {
	ev := Event{Type: EventOutput, SessionID: "ses_0123456789", CallSeq: 1, Stream: StreamStdout, Spilled: true,
		Text: strings.Repeat(strings.Repeat("a", 79)+"\n", 64<<10/80)}
	data := stdEncode(b, &ev)
	b.Run("append", func(b *testing.B) {
		b.SetBytes(int64(len(ev.Text)))
		var buf []byte
		for b.Loop() {
			buf, _ = AppendEventJSON(buf[:0], &ev)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(ev.Text)))
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		for b.Loop() {
			buf.Reset()
			_ = enc.Encode(&ev)
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(ev.Text)))
		for b.Loop() {
			var got Event
			_ = UnmarshalEvent(data, &got)
		}
	})
	b.Run("encoding-json-unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(ev.Text)))
		for b.Loop() {
			var got Event
			_ = json.Unmarshal(data, &got)
		}
	})
}
