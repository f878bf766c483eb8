package postgres

import "net"

// newClosedPort returns a port on 127.0.0.1 that nothing listens on.
func newClosedPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}
