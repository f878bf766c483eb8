//go:build !unix

package fleetsim

// checkFiles has nothing to check where there is no RLIMIT_NOFILE.
func checkFiles(int) error { return nil }

// processCPU is not read where there is no getrusage.
func processCPU() (float64, bool) { return 0, false }
