package worker

import (
	"errors"

	"golang.org/x/sys/unix"
)

// chownEntry gives the entry name of the directory open as dirfd, which is
// not a directory, to u. It opens the entry itself (O_PATH, not following
// a link) and checks and changes that very file, so that session code
// cannot swap another one in between.
func chownEntry(dirfd int, name string, u *sessionUser, hidden map[fileID]bool) error {
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if !giveable(&st, u, hidden) {
		return nil
	}
	return unix.Fchownat(fd, "", int(u.uid), int(u.gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}
