//go:build !unix

package fleetsim

// checkFiles has nothing to check where there is no RLIMIT_NOFILE.
func checkFiles(int) error { return nil }
