//go:build !unix

package main

import "io/fs"

// fileOwner reports no owner: this platform has no Unix ownership.
func fileOwner(fs.FileInfo) (uid, gid uint32, ok bool) { return 0, 0, false }
