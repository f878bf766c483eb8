//go:build race && linux

package e2e

// buildFlags build the binary under test with the race detector when the
// tests themselves run with it, so races in the real processes show up.
var buildFlags = []string{"-race"}
