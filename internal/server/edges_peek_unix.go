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
// silent one. It peeks without blocking and through Control, which does
// not wait for the read that the connection's server goroutine is
// blocked in.
func hasPending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		pending = err == nil && n > 0
	})
	return pending
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
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	if err := raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0 || isTLS // 0: end of stream
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		default:
			closed = true // reset
		}
	}); err != nil {
		return true // closed here already
	}
	return closed
}
