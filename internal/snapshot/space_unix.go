//go:build linux || darwin

package snapshot

import "syscall"

// freeSpace returns the bytes an unprivileged user may still write on the
// file system holding dir, and its size.
func freeSpace(dir string) (free, total int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
