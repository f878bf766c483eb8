//go:build !linux

package procguard

// NotDumpable is a no-op where prctl(2) does not exist.
func NotDumpable() error { return nil }

// Dumpable reports true where prctl(2) does not exist.
func Dumpable() bool { return true }

func scrubEnvBlock([]string) {}

func scrubArgBlock(string) {}
