package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Layout builds the mounts of a sandbox as bwrap arguments, in order:
// each mount covers what earlier ones put at and below its destination.
//
// Hidden host paths are never shown, whatever is bound: every bind that
// would show one (because the hidden path lies inside its source) is
// followed at once by a mask over it, an empty tmpfs for a directory and
// /dev/null for anything else. A later bind may still put something inside
// a masked directory on purpose (a session's state dir inside the worker's
// data dir); Args makes the masks read-only after every bind is made.
type Layout struct {
	hide   []string // host paths never shown, as given and resolved
	args   []string
	masked []string // sandbox paths of directory masks
	bound  []string // host system directories bound
}

// NewLayout returns an empty layout that never shows the host paths hide
// (missing ones are ignored).
func NewLayout(hide ...string) *Layout {
	l := &Layout{}
	for _, h := range hide {
		if h == "" || !filepath.IsAbs(h) {
			continue
		}
		h = filepath.Clean(h)
		l.addHidden(h)
		if real, err := filepath.EvalSymlinks(h); err == nil {
			l.addHidden(real)
		}
	}
	return l
}

func (l *Layout) addHidden(p string) {
	if !slices.Contains(l.hide, p) {
		l.hide = append(l.hide, p)
	}
}

// System binds the host's SystemDirs read-only (recreating top-level
// symlinks) and the directory of /etc/resolv.conf's target when it lies
// elsewhere (systemd-resolved's /run/systemd/resolve), so DNS works.
func (l *Layout) System() *Layout {
	for _, d := range SystemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				l.args = append(l.args, "--symlink", target, d)
			}
		case fi.IsDir():
			l.Bind(Bind{Src: d, Dest: d, ReadOnly: true})
			l.bound = append(l.bound, d)
		}
	}
	if r, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !Under(r, l.bound...) {
		l.Bind(Bind{Src: filepath.Dir(r), Dest: filepath.Dir(r), ReadOnly: true})
	}
	return l
}

// ProcDev mounts a new /proc (of the sandbox's pid namespace) and a
// minimal /dev.
func (l *Layout) ProcDev() *Layout {
	l.args = append(l.args, "--proc", "/proc", "--dev", "/dev")
	return l
}

// Bind binds b, then masks the hidden paths it would show.
func (l *Layout) Bind(b Bind) *Layout {
	flag := "--bind"
	if b.ReadOnly {
		flag = "--ro-bind"
	}
	l.args = append(l.args, flag, b.Src, b.Dest)
	l.maskUnder(b)
	return l
}

// DevBind binds the device (or directory of devices) path at the same
// path, usable as devices.
func (l *Layout) DevBind(path string) *Layout {
	l.args = append(l.args, "--dev-bind", path, path)
	l.maskUnder(Bind{Src: path, Dest: path})
	return l
}

// maskUnder masks what b shows of the hidden paths.
func (l *Layout) maskUnder(b Bind) {
	srcs := []string{filepath.Clean(b.Src)}
	if real, err := filepath.EvalSymlinks(b.Src); err == nil && real != srcs[0] {
		srcs = append(srcs, real)
	}
	for _, h := range l.hide {
		for _, src := range srcs {
			if !Under(h, src) {
				continue
			}
			rel, err := filepath.Rel(src, h)
			if err != nil {
				continue
			}
			l.mask(h, filepath.Join(b.Dest, rel))
		}
	}
}

// mask covers dest, where the sandbox would show hidden host path h.
func (l *Layout) mask(h, dest string) {
	fi, err := os.Stat(h)
	switch {
	case err != nil:
		return // nothing there to show
	case Under(dest, l.masked...):
		return // inside a mask already
	case fi.IsDir():
		l.args = append(l.args, "--tmpfs", dest)
		l.masked = append(l.masked, dest)
	default:
		l.args = append(l.args, "--ro-bind", os.DevNull, dest)
	}
}

// Args returns the layout's arguments, the directory masks made read-only
// at the end.
func (l *Layout) Args() []string {
	args := slices.Clone(l.args)
	for _, m := range l.masked {
		args = append(args, "--remount-ro", m)
	}
	return args
}
