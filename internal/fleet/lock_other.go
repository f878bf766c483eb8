//go:build !unix

package fleet

import "os"

// TryLock does not lock where flock(2) does not exist: one process per data
// dir is then up to the operator.
func TryLock(*os.File) (bool, error) { return true, nil }

// Unlock closes f.
func Unlock(f *os.File) { f.Close() }
