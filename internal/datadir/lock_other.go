//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package datadir

import (
	"errors"
	"os"
)

var errWouldBlock = errors.New("locked")

// flock does nothing where there is no flock: the data dir is not locked.
func flock(*os.File) error { return nil }

func funlock(*os.File) {}
