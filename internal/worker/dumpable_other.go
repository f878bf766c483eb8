//go:build !linux

package worker

// ProtectSecrets is a no-op where prctl(2) does not exist.
func ProtectSecrets() error { return nil }

func dumpable() bool { return true }
