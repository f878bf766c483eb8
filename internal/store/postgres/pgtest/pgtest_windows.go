// Package pgtest starts throwaway PostgreSQL servers for tests. On Windows
// it starts none: Require, StartT and Shared skip the test, so the tests
// that use it compile and vet for Windows.
package pgtest

import (
	"context"
	"errors"
	"os"
	"testing"
)

// Options configure a server.
type Options struct {
	Fsync          bool
	MaxConnections int
	Settings       []string
}

// User is the superuser every server trusts.
const User = "outpost"

// Server is a running PostgreSQL server; none runs on Windows.
type Server struct {
	Dir  string
	Port int
}

var errWindows = errors.New("pgtest: throwaway PostgreSQL servers are not supported on windows")

// BinDir returns "": the tests' servers run on Unix only.
func BinDir() string { return "" }

// Require skips tb.
func Require(tb testing.TB) string {
	tb.Helper()
	tb.Skip("PostgreSQL test servers run on Unix only")
	return ""
}

// Start fails.
func Start(Options) (*Server, error) { return nil, errWindows }

// StartT skips tb.
func StartT(tb testing.TB, _ Options) *Server {
	tb.Helper()
	Require(tb)
	return nil
}

// Shared skips tb.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	Require(tb)
	return nil
}

// Main runs the tests.
func Main(m *testing.M) { os.Exit(m.Run()) }

// Log returns "".
func (*Server) Log() string { return "" }

// URL returns "".
func (*Server) URL(string) string { return "" }

// CreateDatabase fails.
func (*Server) CreateDatabase(context.Context) (string, error) { return "", errWindows }

// Database skips tb.
func (*Server) Database(tb testing.TB) string {
	tb.Helper()
	Require(tb)
	return ""
}

// Crash fails.
func (*Server) Crash() error { return errWindows }

// Restart fails.
func (*Server) Restart() error { return errWindows }

// Stop does nothing.
func (*Server) Stop() error { return nil }
