//go:build !(linux || darwin)

package snapshot

import "errors"

// freeSpace is not measured here: Restore then writes without a budget.
func freeSpace(string) (free, total int64, err error) {
	return 0, 0, errors.New("free space is not measured on this system")
}
