//go:build !unix

package server

import "net"

// hasPending cannot peek on this platform: a connection counts as silent
// until the server reads from it.
func hasPending(net.Conn) bool { return false }
