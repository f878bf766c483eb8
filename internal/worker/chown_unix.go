//go:build unix

package worker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The worker gives the run-as user trees that user already controls: the
// workspace, its HOME, a session's state dir. Session code can replace any
// directory in them with a symbolic link at any moment (a process left
// behind, renameat2 with RENAME_EXCHANGE in a loop), so a root worker that
// resolves a path below the tree's root may follow such a link and hand a
// root-only directory to the user. chownTree therefore never resolves a
// path inside the tree: it opens each directory relative to its parent's
// descriptor with O_NOFOLLOW|O_DIRECTORY, lists it through that
// descriptor, and changes each entry through a descriptor of its own or
// relative to its directory's, never following a link. A file with more
// than one link that is not the user's yet is left alone: it may be a hard
// link to a file outside the tree.

// fileID identifies a file by its device and inode, which a rename keeps.
type fileID struct{ dev, ino uint64 }

func statID(st *unix.Stat_t) fileID { return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)} }

// openDirFlags open a directory without following a symbolic link.
const openDirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// treeChown is one chownTree walk.
type treeChown struct {
	u      *sessionUser
	hidden map[fileID]bool // the hidden paths, never given away
}

// chownTree gives root and everything under it to the run-as user,
// without following symbolic links (root itself included) and leaving
// alone hidden paths, files with other links, and remote logs (the worker
// writes those). Entries that vanish or change type during the walk are
// skipped: the session changed them, and nothing is followed.
func (iso *isolation) chownTree(root string) error {
	t := treeChown{u: iso.user, hidden: map[fileID]bool{}}
	for _, h := range iso.hide {
		var st unix.Stat_t
		if unix.Stat(h, &st) == nil {
			t.hidden[statID(&st)] = true
		}
	}
	fd, err := unix.Open(root, openDirFlags, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			err = errors.New("not a directory (a symbolic link is not followed)")
		}
		return fmt.Errorf("give %s to the run-as user: %w", root, err)
	}
	if err := t.dir(fd, root, true); err != nil {
		return fmt.Errorf("give %s to the run-as user: %w", root, err)
	}
	return nil
}

// dir gives the directory open as fd (which it closes), at path, and what
// it holds to the user.
func (t *treeChown) dir(fd int, path string, root bool) error {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if !root && t.hidden[statID(&st)] {
		return nil
	}
	if !t.owns(&st) {
		if err := unix.Fchown(fd, int(t.u.uid), int(t.u.gid)); err != nil {
			return fmt.Errorf("give %s to %s: %w", path, t.u.name, err)
		}
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	for _, name := range names {
		p := filepath.Join(path, name)
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("stat %s: %w", p, err)
		}
		switch {
		case cst.Mode&unix.S_IFMT == unix.S_IFDIR:
			cfd, err := unix.Openat(fd, name, openDirFlags, 0)
			switch {
			case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
				continue // replaced since it was listed
			case err != nil:
				return fmt.Errorf("open %s: %w", p, err)
			}
			if err := t.dir(cfd, p, false); err != nil {
				return err
			}
		case name == remoteLogName && cst.Mode&unix.S_IFMT == unix.S_IFREG:
		case t.owns(&cst), t.hidden[statID(&cst)]:
		default:
			if err := chownEntry(fd, name, t.u, t.hidden); err != nil {
				return fmt.Errorf("give %s to %s: %w", p, t.u.name, err)
			}
		}
	}
	return nil
}

// owns reports whether the user already owns st's file.
func (t *treeChown) owns(st *unix.Stat_t) bool {
	return st.Uid == t.u.uid && st.Gid == t.u.gid
}

// chownDir gives the directory path (not a symbolic link's target) to u
// unless it has it. Only its last element may be the user's: the worker
// calls it on the workspace, its repos/ and a state dir's sandbox
// directories, whose parents session code cannot replace.
func chownDir(path string, u *sessionUser) error {
	fd, err := unix.Open(path, openDirFlags, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			err = errors.New("not a directory (a symbolic link is not followed)")
		}
		return fmt.Errorf("give %s to %s: %w", path, u.name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("give %s to %s: %w", path, u.name, err)
	}
	if st.Uid == u.uid && st.Gid == u.gid {
		return nil
	}
	if err := unix.Fchown(fd, int(u.uid), int(u.gid)); err != nil {
		return fmt.Errorf("give %s to %s: %w", path, u.name, err)
	}
	return nil
}

// giveable reports whether the file st, met as an entry that is not a
// directory, may be given to u: not a directory now (it was replaced since
// it was listed), not hidden, not u's already, and with no other link,
// which could be a hard link to a file outside the tree.
func giveable(st *unix.Stat_t, u *sessionUser, hidden map[fileID]bool) bool {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR, hidden[statID(st)]:
		return false
	case st.Uid == u.uid && st.Gid == u.gid:
		return false
	}
	return st.Nlink <= 1
}
