//go:build !linux

package podmantest

import "testing"

// Require skips tb: the tests run Podman with runc, which needs Linux.
func Require(tb testing.TB) {
	tb.Helper()
	tb.Skip("the docker backend's tests run Podman, which needs Linux")
}

// API skips tb (see Require).
func API(tb testing.TB) string {
	tb.Helper()
	Require(tb)
	return ""
}

// Containers skips tb (see Require).
func Containers(tb testing.TB, _ string) []string {
	tb.Helper()
	Require(tb)
	return nil
}
