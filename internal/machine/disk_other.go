//go:build !unix

package machine

// DiskFreeBytes is unknown here (0): only Unix file systems are asked.
func DiskFreeBytes(dir string) int64 { return 0 }
