// Package redact replaces secret values with [REDACTED:NAME]. It is the one
// rule for secrets everywhere: the remote applies it to tool output and
// results before they leave the machine, the control plane to what it writes
// on transcripts (the arguments of calls, messages), so a value never shows
// in one place and not in another. The value is matched as it is, also
// inside JSON strings (after their escapes are decoded) and across the
// chunks of a stream.
package redact

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"strings"
)

// secret is one secret value and what replaces it.
type secret struct {
	value []byte
	repl  []byte
}

// Set redacts a fixed set of secrets. A nil *Set redacts nothing. A Set is
// safe for concurrent use.
type Set struct {
	list  []secret // longest value first
	first [256]bool
}

// NewSet returns the set for secrets (name → value); empty values are
// ignored. It returns nil when there is nothing to redact.
func NewSet(secrets map[string]string) *Set {
	s := &Set{}
	for name, v := range secrets {
		if v == "" {
			continue
		}
		s.list = append(s.list, secret{value: []byte(v), repl: []byte("[REDACTED:" + name + "]")})
		s.first[v[0]] = true
	}
	if len(s.list) == 0 {
		return nil
	}
	sortSecrets(s.list)
	return s
}

// sortSecrets puts the longest values first, so that a secret holding
// another is redacted whole.
func sortSecrets(list []secret) {
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if len(a.value) != len(b.value) {
			return len(a.value) > len(b.value)
		}
		if c := bytes.Compare(a.repl, b.repl); c != 0 {
			return c < 0
		}
		return bytes.Compare(a.value, b.value) < 0
	})
}

// scan replaces every secret in buf. Unless final, it stops at the first
// position where buf ends with a proper prefix of a secret (a secret may be
// split across writes) and returns the bytes from there as rest, to be
// scanned again with the next write. At one position the longest secret
// wins, and a shorter secret is not replaced while a longer one may still
// match there. Secrets that overlap in buf are replaced together, so no part
// of either is shown.
func (s *Set) scan(buf []byte, final bool) (out, rest []byte) {
	if s == nil {
		return buf, nil
	}
	out = make([]byte, 0, len(buf))
	start := 0
	for i := 0; i < len(buf); {
		if !s.first[buf[i]] {
			i++
			continue
		}
		match, hold := s.matchAt(buf, i, final)
		if hold {
			return append(out, buf[start:i]...), buf[i:]
		}
		if match == nil {
			i++
			continue
		}
		mark := len(out)
		out = append(out, buf[start:i]...)
		out = append(out, match.repl...)
		end := i + len(match.value)
		// Extend over secrets that start inside the match and run past it.
		for p := i + 1; p < end; p++ {
			if !s.first[buf[p]] {
				continue
			}
			m, hold := s.matchAt(buf, p, final)
			if hold {
				return append(out[:mark], buf[start:i]...), buf[i:] // wait for more data
			}
			if m != nil && p+len(m.value) > end {
				out = append(out, m.repl...)
				end = p + len(m.value)
			}
		}
		i, start = end, end
	}
	return append(out, buf[start:]...), nil
}

// matchAt returns the longest secret at buf[i:], or hold when buf ends with
// a proper prefix of a secret at least as long as any match there.
func (s *Set) matchAt(buf []byte, i int, final bool) (match *secret, hold bool) {
	for k := range s.list {
		sec := &s.list[k]
		if len(buf)-i >= len(sec.value) {
			if bytes.Equal(buf[i:i+len(sec.value)], sec.value) {
				return sec, false
			}
		} else if !final && bytes.HasPrefix(sec.value, buf[i:]) {
			return nil, true
		}
	}
	return nil, false
}

// String replaces every secret in str.
func (s *Set) String(str string) string {
	if s == nil {
		return str
	}
	out, _ := s.scan([]byte(str), true)
	return string(out)
}

// Folded is s for text that was lower-cased after a secret may have gone
// into it, such as a host name, which is normalized to lower case: it
// redacts each value as it is and in lower case, under the same name, so a
// secret with capitals is not shown in lower case. A nil s gives nil.
func (s *Set) Folded() *Set {
	if s == nil {
		return nil
	}
	f := &Set{list: slices.Clone(s.list), first: s.first}
	for _, sec := range s.list {
		if low := bytes.ToLower(sec.value); !bytes.Equal(low, sec.value) {
			f.list = append(f.list, secret{value: low, repl: sec.repl})
			f.first[low[0]] = true
		}
	}
	sortSecrets(f.list)
	return f
}

// JSON replaces every secret in the strings (and object keys) of a JSON
// document; what is not JSON is redacted as text. A document without a
// secret comes back as it is, byte for byte.
func (s *Set) JSON(raw json.RawMessage) json.RawMessage {
	if s == nil || len(raw) == 0 {
		return raw
	}
	if !json.Valid(raw) {
		out, _ := s.scan(raw, true)
		return out
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		out, _ := s.scan(raw, true)
		return out
	}
	v, changed := s.redactAny(v)
	if !changed {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		out, _ := s.scan(raw, true)
		return out
	}
	return out
}

// redactAny redacts the strings of a decoded JSON value and reports
// whether any changed.
func (s *Set) redactAny(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		r := s.String(x)
		return r, r != x
	case []any:
		changed := false
		for i := range x {
			var c bool
			x[i], c = s.redactAny(x[i])
			changed = changed || c
		}
		return x, changed
	case map[string]any:
		m := make(map[string]any, len(x))
		changed := false
		for k, e := range x {
			rk := s.String(k)
			re, c := s.redactAny(e)
			m[rk] = re
			changed = changed || c || rk != k
		}
		return m, changed
	}
	return v, false
}

// Stream redacts one output stream (of one call). A secret split across two
// writes is still replaced: bytes that may begin a secret are held back until
// the next write or Flush.
type Stream struct {
	set     *Set
	pending []byte
}

// NewStream returns a Stream redacting set.
func NewStream(set *Set) *Stream { return &Stream{set: set} }

// Set is the set the stream redacts.
func (r *Stream) Set() *Set { return r.set }

// Write returns the part of p (after what was held back) that is safe to
// send. The result may alias p.
func (r *Stream) Write(p []byte) []byte {
	if r.set == nil {
		return p
	}
	buf := p
	if len(r.pending) > 0 {
		buf = append(r.pending, p...)
	}
	out, rest := r.set.scan(buf, false)
	r.pending = append([]byte(nil), rest...)
	return out
}

// Flush returns what was held back, redacted.
func (r *Stream) Flush() []byte {
	if len(r.pending) == 0 {
		return nil
	}
	out, _ := r.set.scan(r.pending, true)
	r.pending = nil
	return out
}

// Scanner finds secret values in a stream of chunks, also when one is split
// across two chunks: for data that must not leave at all rather than be
// redacted (an artifact).
type Scanner struct {
	set   *Set
	carry []byte
	max   int
}

// NewScanner returns a Scanner for set.
func NewScanner(set *Set) *Scanner {
	sc := &Scanner{set: set}
	if set != nil {
		for _, s := range set.list {
			sc.max = max(sc.max, len(s.value))
		}
	}
	return sc
}

// Find returns the name of a secret found in the stream so far, or "".
func (sc *Scanner) Find(p []byte) string {
	if sc.set == nil {
		return ""
	}
	window := append(sc.carry, p...)
	for _, s := range sc.set.list {
		if bytes.Contains(window, s.value) {
			return strings.TrimSuffix(strings.TrimPrefix(string(s.repl), "[REDACTED:"), "]")
		}
	}
	keep := min(len(window), sc.max-1)
	sc.carry = append(sc.carry[:0:0], window[len(window)-keep:]...)
	return ""
}
