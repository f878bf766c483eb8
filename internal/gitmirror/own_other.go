//go:build !unix

package gitmirror

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ownedByMe reports whether the worker's user owns fi: always, where
// sessions do not run as another user.
func ownedByMe(os.FileInfo) bool { return true }

// takeBack is never needed here.
func takeBack(string) error { return nil }

// readPlain reads at most limit bytes of path when it is a regular file;
// nil without error when there is no file.
func readPlain(path string, limit int64) ([]byte, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a plain file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
