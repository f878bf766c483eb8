//go:build !linux

package sockguard

// Restricted reports false where restricted sessions do not exist.
func Restricted() (bool, error) { return false, nil }

// Apply does nothing where restricted sessions do not exist.
func Apply() error { return nil }
