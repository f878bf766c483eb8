//go:build unix

package machine

import "golang.org/x/sys/unix"

// DiskFreeBytes is the space an unprivileged user may still write on the
// file system of dir; 0 when it cannot be read.
func DiskFreeBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
