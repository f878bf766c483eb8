//go:build !linux

package sandbox

import (
	"errors"
	"os"
)

// ArgsFile is Linux only: bubblewrap runs on Linux alone.
func ArgsFile([]string) (*os.File, error) {
	return nil, errors.New("bubblewrap sandboxes need Linux")
}
