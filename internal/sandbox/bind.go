package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Bind is a host path bound into a sandbox.
type Bind struct {
	Src, Dest string
	ReadOnly  bool
}

// String spells the bind as the flag that makes it (--bwrap-bind or
// --bwrap-ro-bind SRC:DEST), the spelling of `outpost orchestrate` and
// `outpost worker start`.
func (b Bind) String() string {
	flag := "--bwrap-bind"
	if b.ReadOnly {
		flag = "--bwrap-ro-bind"
	}
	return flag + " " + b.Src + ":" + b.Dest
}

// ParseBind parses SRC[:DEST] (DEST defaults to SRC): both must be
// absolute and SRC must exist.
func ParseBind(spec string, readOnly bool) (Bind, error) {
	src, dest, hasDest := strings.Cut(spec, ":")
	if !hasDest {
		dest = src
	}
	b := Bind{Src: filepath.Clean(src), Dest: filepath.Clean(dest), ReadOnly: readOnly}
	switch {
	case src == "" || hasDest && dest == "":
		return b, fmt.Errorf("bind %q: want SRC[:DEST]", spec)
	case !filepath.IsAbs(src):
		return b, fmt.Errorf("bind %q: SRC must be an absolute path", spec)
	case !filepath.IsAbs(dest):
		return b, fmt.Errorf("bind %q: DEST must be an absolute path", spec)
	case b.Dest == "/":
		return b, fmt.Errorf("bind %q: DEST cannot be /", spec)
	}
	if _, err := os.Stat(b.Src); err != nil {
		return b, fmt.Errorf("bind %q: %w", spec, err)
	}
	return b, nil
}

// CheckBinds checks extra binds given by a person: each must parse, and
// bwrap cannot make a mount point inside a read-only system directory.
func CheckBinds(binds []Bind) error {
	for _, bd := range binds {
		if _, err := ParseBind(bd.Src+":"+bd.Dest, bd.ReadOnly); err != nil {
			return err
		}
		if _, err := os.Lstat(bd.Dest); err != nil && Under(bd.Dest, HostSystemDirs()...) {
			return fmt.Errorf("%s: DEST %s is inside a read-only system directory of the sandbox (%s) and does not exist on the host; choose a DEST outside them, e.g. /tools",
				bd, bd.Dest, strings.Join(HostSystemDirs(), ", "))
		}
	}
	return nil
}
