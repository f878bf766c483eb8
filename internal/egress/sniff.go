package egress

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
)

// maxPeek bounds what the engine reads of a connection before deciding: a
// whole TLS record (a ClientHello fits one) or an HTTP request head.
const maxPeek = 5 + 16384

type sniffState int

const (
	sniffMore sniffState = iota // not enough bytes yet
	sniffDone                   // a name was found
	sniffNone                   // the bytes carry no name
)

// sniff looks for the server name in the first bytes of a connection: the
// SNI of a TLS ClientHello or the Host header of an HTTP/1 request.
func sniff(b []byte) (string, sniffState) {
	if len(b) == 0 {
		return "", sniffMore
	}
	if b[0] == 0x16 {
		return sniffTLS(b)
	}
	return sniffHTTP(b)
}

func sniffTLS(b []byte) (string, sniffState) {
	if len(b) < 5 {
		return "", sniffMore
	}
	if b[1] != 3 {
		return "", sniffNone
	}
	n := int(binary.BigEndian.Uint16(b[3:5]))
	if len(b) < 5+n {
		return "", sniffMore
	}
	host, ok := clientHelloSNI(b[5 : 5+n])
	if !ok || host == "" {
		return "", sniffNone
	}
	return host, sniffDone
}

// clientHelloSNI parses a handshake message holding a ClientHello.
func clientHelloSNI(m []byte) (string, bool) {
	r := reader(m)
	typ, ok := r.u8()
	if !ok || typ != 1 {
		return "", false
	}
	body, ok := r.bytes24()
	if !ok {
		return "", false
	}
	r = reader(body)
	if !r.skip(2 + 32) { // version, random
		return "", false
	}
	if _, ok := r.bytes8(); !ok { // session id
		return "", false
	}
	if _, ok := r.bytes16(); !ok { // cipher suites
		return "", false
	}
	if _, ok := r.bytes8(); !ok { // compression methods
		return "", false
	}
	exts, ok := r.bytes16()
	if !ok {
		return "", false
	}
	r = reader(exts)
	for len(r) > 0 {
		typ, ok1 := r.u16()
		data, ok2 := r.bytes16()
		if !ok1 || !ok2 {
			return "", false
		}
		if typ != 0 { // server_name
			continue
		}
		s := reader(data)
		list, ok := s.bytes16()
		if !ok {
			return "", false
		}
		s = reader(list)
		for len(s) > 0 {
			kind, ok1 := s.u8()
			name, ok2 := s.bytes16()
			if !ok1 || !ok2 {
				return "", false
			}
			if kind == 0 && validHost(string(name)) {
				return string(name), true
			}
		}
		return "", false
	}
	return "", false
}

var httpMethods = []string{"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

func sniffHTTP(b []byte) (string, sniffState) {
	method := false
	for _, m := range httpMethods {
		k := min(len(b), len(m))
		if string(b[:k]) == m[:k] {
			method = true
			break
		}
	}
	if !method {
		return "", sniffNone
	}
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if len(b) >= maxPeek {
			return "", sniffNone
		}
		return "", sniffMore
	}
	lines := strings.Split(string(b[:end]), "\r\n")
	// The request target names a host too when it is absolute (a proxy
	// request) or an authority (CONNECT); a server may prefer it to the
	// Host header, so the two must agree.
	var target string
	if parts := strings.Fields(lines[0]); len(parts) == 3 {
		switch t := parts[1]; {
		case parts[0] == "CONNECT":
			target = t
		case len(t) > 8 && strings.EqualFold(t[:7], "http://"):
			target, _, _ = strings.Cut(t[7:], "/")
		case len(t) > 9 && strings.EqualFold(t[:8], "https://"):
			target, _, _ = strings.Cut(t[8:], "/")
		}
	} else {
		return "", sniffNone
	}
	var host string
	hosts := 0
	for _, line := range lines[1:] {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "host") {
			continue
		}
		hosts++
		host = v
	}
	if hosts > 1 {
		return "", sniffNone
	}
	if hosts == 1 {
		host = hostOfAuthority(host)
		if !validHost(host) {
			return "", sniffNone
		}
	}
	if target != "" {
		t := hostOfAuthority(target)
		if !validHost(t) || hosts == 1 && !strings.EqualFold(t, host) {
			return "", sniffNone
		}
		host = t
	}
	if host == "" {
		return "", sniffNone
	}
	return host, sniffDone
}

// hostOfAuthority returns the host of "host[:port]" (userinfo refused).
func hostOfAuthority(a string) string {
	a = strings.TrimSpace(a)
	if strings.Contains(a, "@") {
		return ""
	}
	if h, _, err := net.SplitHostPort(a); err == nil {
		a = h
	}
	return strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
}

// validHost accepts DNS names only (no addresses, no odd bytes): a name is
// what AllowName and the resolver are asked about, and an address in a Host
// header is decided by AllowAddr like any other.
func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

type reader []byte

func (r *reader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *reader) u8() (byte, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return v, true
}

func (r *reader) u16() (uint16, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*r)
	*r = (*r)[2:]
	return v, true
}

func (r *reader) take(n int) ([]byte, bool) {
	if len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *reader) bytes8() ([]byte, bool) {
	n, ok := r.u8()
	if !ok {
		return nil, false
	}
	return r.take(int(n))
}

func (r *reader) bytes16() ([]byte, bool) {
	n, ok := r.u16()
	if !ok {
		return nil, false
	}
	return r.take(int(n))
}

func (r *reader) bytes24() ([]byte, bool) {
	if len(*r) < 3 {
		return nil, false
	}
	n := int((*r)[0])<<16 | int((*r)[1])<<8 | int((*r)[2])
	*r = (*r)[3:]
	return r.take(n)
}

// MaxClientHello bounds what a caller should buffer before calling
// TLSServerName: one whole TLS record.
const MaxClientHello = maxPeek

// TLSServerName reads the server name (SNI) of the TLS ClientHello that b
// starts with. done is false while b is too short to tell; once done,
// name is the SNI, or "" when b is not a ClientHello or carries no name.
func TLSServerName(b []byte) (name string, done bool) {
	if len(b) > 0 && b[0] != 0x16 {
		return "", true
	}
	name, st := sniffTLS(b)
	return name, st != sniffMore
}
