package remote

import (
	"bytes"
	"encoding/json"
	"sort"
)

// secret is one secret value and what replaces it.
type secret struct {
	value []byte
	repl  []byte
}

// secretSet redacts a fixed set of secrets. A nil *secretSet redacts nothing.
type secretSet struct {
	list  []secret // longest value first
	first [256]bool
}

// newSecretSet returns the set for secrets (name → value); empty values are
// ignored. It returns nil when there is nothing to redact.
func newSecretSet(secrets map[string]string) *secretSet {
	s := &secretSet{}
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
	sort.Slice(s.list, func(i, j int) bool {
		a, b := s.list[i], s.list[j]
		if len(a.value) != len(b.value) {
			return len(a.value) > len(b.value)
		}
		return bytes.Compare(a.repl, b.repl) < 0
	})
	return s
}

// scan replaces every secret in buf. Unless final, it stops at the first
// position where buf ends with a proper prefix of a secret (a secret may be
// split across writes) and returns the bytes from there as rest, to be
// scanned again with the next write. At one position the longest secret
// wins, and a shorter secret is not replaced while a longer one may still
// match there. Secrets that overlap in buf are replaced together, so no part
// of either is shown.
func (s *secretSet) scan(buf []byte, final bool) (out, rest []byte) {
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
func (s *secretSet) matchAt(buf []byte, i int, final bool) (match *secret, hold bool) {
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

// redactString replaces every secret in str.
func (s *secretSet) redactString(str string) string {
	if s == nil {
		return str
	}
	out, _ := s.scan([]byte(str), true)
	return string(out)
}

// redactJSON replaces every secret in the strings (and object keys) of a
// JSON document.
func (s *secretSet) redactJSON(raw json.RawMessage) json.RawMessage {
	if s == nil || len(raw) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		out, _ := s.scan(raw, true)
		return out
	}
	out, err := json.Marshal(s.redactAny(v))
	if err != nil {
		out, _ := s.scan(raw, true)
		return out
	}
	return out
}

func (s *secretSet) redactAny(v any) any {
	switch x := v.(type) {
	case string:
		return s.redactString(x)
	case []any:
		for i := range x {
			x[i] = s.redactAny(x[i])
		}
		return x
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[s.redactString(k)] = s.redactAny(e)
		}
		return m
	}
	return v
}

// redactor redacts one output stream of one call. A secret split across two
// writes is still replaced: bytes that may begin a secret are held back until
// the next write or Flush.
type redactor struct {
	set     *secretSet
	pending []byte
}

func newRedactor(set *secretSet) *redactor { return &redactor{set: set} }

// Write returns the part of p (after what was held back) that is safe to
// send. The result may alias p.
func (r *redactor) Write(p []byte) []byte {
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
func (r *redactor) Flush() []byte {
	if len(r.pending) == 0 {
		return nil
	}
	out, _ := r.set.scan(r.pending, true)
	r.pending = nil
	return out
}
