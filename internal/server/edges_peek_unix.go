//go:build unix

package server

import (
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
