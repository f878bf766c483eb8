package remote

import (
	"bytes"
	"fmt"
)

// vtCleaner removes a pseudo console's terminal controls from its output,
// keeping text: cursor moves forward become spaces, CR LF becomes LF, a
// lone CR goes. A sequence split between reads is completed by the next.
type vtCleaner struct {
	pending []byte
}

func (v *vtCleaner) clean(p []byte) []byte {
	in := append(v.pending, p...)
	v.pending = nil
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		ch := in[i]
		switch {
		case ch == 0x1b:
			n, text, complete := vtSequence(in[i:])
			if !complete {
				v.pending = append([]byte(nil), in[i:]...)
				return out
			}
			out = append(out, text...)
			i += n
			continue
		case ch == '\r':
			if i+1 == len(in) {
				v.pending = []byte{'\r'}
				return out
			}
			// CR LF is a line end; a lone CR goes.
		case ch == 0x07 || ch == 0:
		default:
			out = append(out, ch)
		}
		i++
	}
	return out
}

// vtSequence measures the escape sequence at the start of p (p[0] is ESC):
// its length, the text it stands for, and whether it is complete in p.
func vtSequence(p []byte) (int, []byte, bool) {
	if len(p) < 2 {
		return 0, nil, false
	}
	switch p[1] {
	case '[': // CSI: parameters, intermediates, a final byte
		for j := 2; j < len(p); j++ {
			if c := p[j]; c >= 0x40 && c <= 0x7e {
				if c == 'C' { // cursor forward: spaces
					n := 1
					if params := string(p[2:j]); params != "" {
						if _, err := fmt.Sscanf(params, "%d", &n); err != nil || n < 1 || n > 4096 {
							n = 1
						}
					}
					return j + 1, bytes.Repeat([]byte{' '}, n), true
				}
				return j + 1, nil, true
			}
		}
		return 0, nil, false
	case ']', 'P', '_', '^': // OSC and other strings: up to BEL or ST
		for j := 2; j < len(p); j++ {
			if p[j] == 0x07 {
				return j + 1, nil, true
			}
			if p[j] == 0x1b && j+1 < len(p) && p[j+1] == '\\' {
				return j + 2, nil, true
			}
		}
		return 0, nil, false
	case '(', ')', '*', '+': // character set: one more byte
		if len(p) < 3 {
			return 0, nil, false
		}
		return 3, nil, true
	}
	return 2, nil, true
}
