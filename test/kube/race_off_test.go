//go:build !race && !windows

package kube

// buildFlags are the extra flags of the binary under test.
var buildFlags []string
