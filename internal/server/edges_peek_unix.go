//go:build unix

package server

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// hasPending reports whether bytes c's peer sent wait unread in the
// kernel: a connection the server has not got round to reading yet, not a
// silent one.
func hasPending(c net.Conn) bool {
	n, ok, err := peek(c)
	return ok && err == nil && n > 0
}

// peek looks at the next byte c's peer sent, without blocking and without
// taking it: n is 0 at the end of the stream, err EAGAIN when nothing
// waits. It goes through Control, which does not wait for the read the
// connection's server goroutine may be blocked in. ok is false when c has
// no descriptor to peek at, or it is closed here already (err says which).
func peek(c net.Conn) (n int, ok bool, err error) {
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return 0, false, nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false, err
	}
	if cerr := raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); cerr != nil {
		return 0, false, cerr
	}
	return n, true, err
}

// peekable tells that peerClosed can see a peer close a connection.
const peekable = true

// peerClosed reports, without blocking or reading, whether the peer of a
// hijacked connection closed or reset it. On TLS any byte waiting counts
// as closing too: a client waiting for a stream or an answer sends
// nothing, and its close_notify comes before its FIN.
func peerClosed(c net.Conn) bool {
	isTLS := false
	for unwrapped := false; !unwrapped; {
		switch cc := c.(type) {
		case *guardedConn:
			c = cc.Conn
		case *tls.Conn:
			c, isTLS = cc.NetConn(), true
		default:
			unwrapped = true
		}
	}
	n, ok, err := peek(c)
	switch {
	case !ok:
		return err != nil // closed here already; false when it cannot tell
	case err == nil:
		return n == 0 || isTLS // 0: end of stream
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		return false
	}
	return true // reset
}
