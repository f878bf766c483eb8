//go:build !unix

package server

import "net"

// hasPending cannot peek on this platform: a connection counts as silent
// until the server reads from it.
func hasPending(net.Conn) bool { return false }

// peekable tells that peerClosed can see a peer close a connection: not
// here, where a goroutine reading it does (watchPeer).
const peekable = false

// peerClosed cannot peek on this platform.
func peerClosed(net.Conn) bool { return false }
