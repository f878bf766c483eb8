//go:build unix

package datadir

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// chmodRegular sets the mode of the regular file at p that fi (an Lstat
// of p) describes, through a descriptor of that very file: a link or
// another file put at p since fi was taken is left alone rather than
// followed (a data dir others may write in could otherwise have a
// link's target chmod'ed).
func chmodRegular(p string, fi fs.FileInfo, mode fs.FileMode) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) || errors.Is(err, fs.ErrNotExist) {
		return nil // replaced by a link, or gone: not the file checked
	}
	if err != nil {
		return err
	}
	defer f.Close()
	now, err := f.Stat()
	if err != nil {
		return err
	}
	if !os.SameFile(fi, now) {
		return nil
	}
	return f.Chmod(mode)
}
