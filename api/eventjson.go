package api

import (
	"encoding/binary"
	"encoding/json"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// This file holds a fast JSON encoder and decoder for the common shape of
// an Event: every field a string, a number or Spilled, as output, status and
// call events are. Live output reaches a follower as one SSE event per
// chunk, and encoding/json's reflection, validation pass and byte-at-a-time
// string scan were the largest costs of streaming it. Both functions give
// exactly what encoding/json gives, and fall back to it for any other
// shape or any unusual input.

// AppendEventJSON appends the JSON encoding of ev to dst, as
// json.Marshal(ev) would encode it but without escaping <, > and & (like a
// json.Encoder with SetEscapeHTML(false)), and without a trailing newline.
func AppendEventJSON(dst []byte, ev *Event) ([]byte, error) {
	if ev.Capabilities != nil || ev.ToolCalls != nil || ev.Usage != nil || ev.Args != nil ||
		ev.OK != nil || ev.ExitCode != nil || ev.Value != nil || ev.Artifact != nil || ev.NetworkRequest != nil || ev.Approval != nil || hasNetwork(ev) ||
		ev.Action != "" || ev.Actor != "" {
		return appendEventSlow(dst, ev)
	}
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendInt(dst, ev.Seq, 10)
	dst = append(dst, `,"session_id":`...)
	dst = appendJSONString(dst, ev.SessionID)
	dst = append(dst, `,"time_ms":`...)
	dst = strconv.AppendInt(dst, ev.Time, 10)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, ev.Type)
	dst = appendStringField(dst, `,"status":`, ev.Status)
	dst = appendStringField(dst, `,"status_detail":`, ev.StatusDetail)
	dst = appendStringField(dst, `,"reason":`, ev.Reason)
	dst = appendStringField(dst, `,"acceptor_id":`, ev.AcceptorID)
	dst = appendStringField(dst, `,"role":`, ev.Role)
	dst = appendIntField(dst, `,"seen":`, ev.Seen)
	dst = appendIntField(dst, `,"call_seq":`, ev.CallSeq)
	dst = appendStringField(dst, `,"tool":`, ev.Tool)
	dst = appendStringField(dst, `,"stream":`, ev.Stream)
	dst = appendStringField(dst, `,"text":`, ev.Text)
	if ev.Spilled {
		dst = append(dst, `,"spilled":true`...)
	}
	dst = appendIntField(dst, `,"dropped_bytes":`, ev.DroppedBytes)
	dst = appendStringField(dst, `,"error":`, ev.Error)
	dst = appendStringField(dst, `,"step":`, ev.Step)
	dst = appendStringField(dst, `,"machine":`, ev.Machine)
	dst = appendStringField(dst, `,"backend":`, ev.Backend)
	return append(dst, '}'), nil
}

// hasNetwork reports whether a network event's fields are set; those rare
// events take the slow path.
func hasNetwork(ev *Event) bool {
	return ev.Decision != "" || ev.Host != "" || ev.Address != "" || ev.Port != 0 || ev.Protocol != "" ||
		ev.Rule != "" || ev.BytesOut != 0 || ev.BytesIn != 0 || ev.Count != 0
}

func appendEventSlow(dst []byte, ev *Event) ([]byte, error) {
	w := appendWriter{b: dst}
	enc := json.NewEncoder(&w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		return dst, err
	}
	return w.b[:len(w.b)-1], nil // Encode ends with a newline
}

type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func appendStringField(dst []byte, key, v string) []byte {
	if v == "" {
		return dst
	}
	return appendJSONString(append(dst, key...), v)
}

func appendIntField(dst []byte, key string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, key...), v, 10)
}

const (
	swarLo = 0x0101010101010101
	swarHi = 0x8080808080808080
)

// special reports whether one of the eight bytes of w needs escaping in a
// JSON string or is not ASCII: a byte below 0x20, '"', '\\' or a byte with
// its high bit set. Borrows only reach bytes above a matching one, so the
// test is exact for the word as a whole.
func special(w uint64) bool {
	q, bs := w^(swarLo*'"'), w^(swarLo*'\\')
	return ((w-swarLo*0x20)&^w|(q-swarLo)&^q|(bs-swarLo)&^bs|w)&swarHi != 0
}

// plainRun returns the length of the prefix of b that needs no escaping in
// a JSON string: printable ASCII other than '"' and '\\', tested eight
// bytes at a time.
func plainRun(b []byte) int {
	i := 0
	for ; i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])); i += 8 {
	}
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			break
		}
	}
	return i
}

// plainRunString is plainRun of a string (read through a byte slice that
// aliases it, never written).
func plainRunString(s string) int {
	return plainRun(unsafe.Slice(unsafe.StringData(s), len(s)))
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as encoding/json
// does with HTML escaping off: invalid UTF-8 becomes \ufffd and U+2028
// and U+2029 are escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		i += plainRunString(s[i:])
		if i >= len(s) {
			break
		}
		if b := s[i]; b < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// UnmarshalEvent decodes one JSON event into ev, which should be the zero
// Event; the result is what json.Unmarshal(data, ev) gives. Events whose
// fields are all strings, numbers or Spilled, written without unusual
// spelling, are decoded without encoding/json.
func UnmarshalEvent(data []byte, ev *Event) error {
	var fast Event
	if decodeEventFast(data, &fast) {
		*ev = fast
		return nil
	}
	return json.Unmarshal(data, ev)
}

// decodeEventFast decodes data into ev when data is a JSON object of the
// fields it knows, each with a value of its type, and reports whether it
// did. It never accepts what json.Unmarshal would refuse; on false ev is
// in an unspecified state.
func decodeEventFast(data []byte, ev *Event) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for {
		// The key: plain ASCII, matched exactly.
		if i >= len(data) || data[i] != '"' {
			return false
		}
		n := plainRun(data[i+1:])
		end := i + 1 + n
		if end >= len(data) || data[end] != '"' {
			return false
		}
		key := data[i+1 : end]
		i = skipSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		var (
			sp *string
			ip *int64
			ok bool
		)
		switch string(key) {
		case "seq":
			ip = &ev.Seq
		case "session_id":
			sp = &ev.SessionID
		case "time_ms":
			ip = &ev.Time
		case "type":
			sp = &ev.Type
		case "status":
			sp = &ev.Status
		case "status_detail":
			sp = &ev.StatusDetail
		case "reason":
			sp = &ev.Reason
		case "acceptor_id":
			sp = &ev.AcceptorID
		case "role":
			sp = &ev.Role
		case "seen":
			ip = &ev.Seen
		case "call_seq":
			ip = &ev.CallSeq
		case "tool":
			sp = &ev.Tool
		case "stream":
			sp = &ev.Stream
		case "text":
			sp = &ev.Text
		case "error":
			sp = &ev.Error
		case "step":
			sp = &ev.Step
		case "machine":
			sp = &ev.Machine
		case "backend":
			sp = &ev.Backend
		case "dropped_bytes":
			ip = &ev.DroppedBytes
		case "spilled":
			switch {
			case hasLiteral(data, i, "true"):
				ev.Spilled, i = true, i+4
			case hasLiteral(data, i, "false"):
				ev.Spilled, i = false, i+5
			default:
				return false
			}
		default:
			return false // other fields, and keys spelt another way
		}
		switch {
		case sp != nil:
			if *sp, i, ok = parseString(data, i); !ok {
				return false
			}
		case ip != nil:
			if *ip, i, ok = parseInt(data, i); !ok {
				return false
			}
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func hasLiteral(data []byte, i int, lit string) bool {
	return len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit
}

// parseInt reads a JSON integer at data[i:] that fits an int64; numbers
// with a fraction or exponent are left to encoding/json.
func parseInt(data []byte, i int) (int64, int, bool) {
	start := i
	if i < len(data) && data[i] == '-' {
		i++
	}
	digits := i
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	if i == digits || (data[digits] == '0' && i > digits+1) {
		return 0, i, false
	}
	if i < len(data) && (data[i] == '.' || data[i] == 'e' || data[i] == 'E') {
		return 0, i, false
	}
	v, err := strconv.ParseInt(string(data[start:i]), 10, 64)
	return v, i, err == nil
}

// parseString reads the JSON string at data[i:] as encoding/json does:
// escapes are resolved, invalid UTF-8 and lone surrogates become U+FFFD.
func parseString(data []byte, i int) (string, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return "", i, false
	}
	i++
	lit := i       // start of the bytes not yet copied to buf
	var buf []byte // nil until something must be rewritten
	for {
		i += plainRun(data[i:])
		if i >= len(data) {
			return "", i, false
		}
		c := data[i]
		switch {
		case c == '"':
			if buf == nil {
				return string(data[lit:i]), i + 1, true
			}
			buf = append(buf, data[lit:i]...)
			return string(buf), i + 1, true
		case c == '\\':
			if buf == nil {
				buf = make([]byte, 0, len(data)-lit)
			}
			buf = append(buf, data[lit:i]...)
			if i+1 >= len(data) {
				return "", i, false
			}
			switch e := data[i+1]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
				i += 2
			case 'b':
				buf, i = append(buf, '\b'), i+2
			case 'f':
				buf, i = append(buf, '\f'), i+2
			case 'n':
				buf, i = append(buf, '\n'), i+2
			case 'r':
				buf, i = append(buf, '\r'), i+2
			case 't':
				buf, i = append(buf, '\t'), i+2
			case 'u':
				r := getu4(data[i:])
				if r < 0 {
					return "", i, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if dec := utf16.DecodeRune(r, getu4(data[i:])); dec != unicode.ReplacementChar {
						r = dec
						i += 6
					} else {
						r = unicode.ReplacementChar
					}
				}
				buf = utf8.AppendRune(buf, r)
			default:
				return "", i, false
			}
			lit = i
		case c < 0x20:
			return "", i, false
		default: // not ASCII
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				if buf == nil {
					buf = make([]byte, 0, len(data)-lit+2)
				}
				buf = append(buf, data[lit:i]...)
				buf = utf8.AppendRune(buf, utf8.RuneError)
				i++
				lit = i
				continue
			}
			i += size
		}
	}
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
