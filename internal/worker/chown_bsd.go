//go:build unix && !linux

package worker

import (
	"errors"

	"golang.org/x/sys/unix"
)

// chownEntry gives the entry name of the directory open as dirfd, which is
// not a directory, to u, without following a link. Without O_PATH the
// check and the change are two calls on the name: that a hard link cannot
// be swapped in between rests on the system's protection of hard links.
func chownEntry(dirfd int, name string, u *sessionUser, hidden map[fileID]bool) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if !giveable(&st, u, hidden) {
		return nil
	}
	return unix.Fchownat(dirfd, name, int(u.uid), int(u.gid), unix.AT_SYMLINK_NOFOLLOW)
}
