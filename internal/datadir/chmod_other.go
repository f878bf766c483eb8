//go:build !unix

package datadir

import (
	"io/fs"
	"os"
)

// chmodRegular sets the mode of the file at p (Tighten does nothing where
// there are no Unix modes; this keeps the package building there).
func chmodRegular(p string, _ fs.FileInfo, mode fs.FileMode) error {
	return os.Chmod(p, mode)
}
