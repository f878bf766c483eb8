//go:build !race && linux

package e2e

// buildFlags are the extra flags of the binary under test.
var buildFlags []string
