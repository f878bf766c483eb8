// Package dist is the distribution of remote binaries in the public
// "devin-remote" layout: under a base URL,
//
//	latest_<platform>                      the id of the newest build (plain text, no newline)
//	devin-remote_<id>_<platform>           the binary
//	devin-remote_<id>_<platform>.sha256    "<hex sha256>  devin-remote\n", for sha256sum -c
//
// where <platform> is a platform suffix (linux_x64, linux_arm64,
// macos_arm64, windows_x64.exe as the public layout lists them, and
// macos_x64 and windows_arm64.exe, which it does not) and <id> a version id matching
// ^[0-9a-f]{6,40}$. The server publishes its own executable and a directory
// in this layout (Handler); workers resolve a session's pin to a command,
// downloading and verifying the pinned binary into a cache (Resolver). The
// names are spelled here once for both.
package dist

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/outpost-sh/outpost/internal/lazyregexp"
)

// Platform suffixes of the layout.
const (
	SuffixLinuxX64   = "linux_x64"
	SuffixLinuxArm64 = "linux_arm64"
	SuffixMacOSArm64 = "macos_arm64"
	SuffixWindowsX64 = "windows_x64.exe"
	// Intel Macs and Windows on Arm have no build in the public layout;
	// these names follow its pattern.
	SuffixMacOSX64     = "macos_x64"
	SuffixWindowsArm64 = "windows_arm64.exe"
)

// Suffixes lists the platform suffixes, in the order docs list them.
var Suffixes = []string{SuffixLinuxX64, SuffixLinuxArm64, SuffixMacOSArm64, SuffixWindowsX64, SuffixMacOSX64, SuffixWindowsArm64}

// RemoteName is the name a remote binary is run under; invoked by that
// name (or RemoteName+".exe", or a published file name) the outpost
// executable behaves as `outpost remote`.
const RemoteName = "devin-remote"

// Layout name parts.
const (
	latestPrefix   = "latest_"
	binaryPrefix   = RemoteName + "_"
	checksumSuffix = ".sha256"
	exeSuffix      = ".exe"
)

// idPattern is what a version id must be, as public clients check it.
var idPattern = lazyregexp.New(`^[0-9a-f]{6,40}$`)

// ValidID reports whether s is a version id: 6 to 40 lower-case hex digits.
func ValidID(s string) bool { return idPattern.MatchString(s) }

// CheckID returns an error saying what a version id must be, or nil.
func CheckID(s string) error {
	if !ValidID(s) {
		return fmt.Errorf("%q is not a remote version id: use 6 to 40 lower-case hex digits (a git commit prefix such as 1a2b3c4d5e6f)", s)
	}
	return nil
}

// SameID reports whether two version ids name one build: one is a prefix of
// the other, so a short git SHA pins the build whose id is longer, and a
// full SHA the build whose id is its 12-digit prefix.
func SameID(a, b string) bool {
	if !ValidID(a) || !ValidID(b) {
		return false
	}
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// Suffix returns the platform suffix of a GOOS/GOARCH pair, or "" when the
// layout has none for it.
func Suffix(goos, goarch string) string {
	switch goos + "/" + goarch {
	case "linux/amd64":
		return SuffixLinuxX64
	case "linux/arm64":
		return SuffixLinuxArm64
	case "darwin/arm64":
		return SuffixMacOSArm64
	case "windows/amd64":
		return SuffixWindowsX64
	case "darwin/amd64":
		return SuffixMacOSX64
	case "windows/arm64":
		return SuffixWindowsArm64
	}
	return ""
}

// HostSuffix is the platform suffix of this build's GOOS/GOARCH, or "".
func HostSuffix() string { return Suffix(runtime.GOOS, runtime.GOARCH) }

// ValidSuffix reports whether s is one of Suffixes.
func ValidSuffix(s string) bool {
	for _, v := range Suffixes {
		if s == v {
			return true
		}
	}
	return false
}

// LatestName is the name of the latest pointer of a platform:
// latest_linux_x64, …, latest_windows_x64.exe (the suffix as documented,
// which the server also answers without ".exe").
func LatestName(suffix string) string { return latestPrefix + suffix }

// BinaryName is the published name of a build: devin-remote_<id>_<suffix>.
func BinaryName(id, suffix string) string { return binaryPrefix + id + "_" + suffix }

// ChecksumName is the name of a build's check line file.
func ChecksumName(id, suffix string) string { return BinaryName(id, suffix) + checksumSuffix }

// ExecName is the file name a downloaded remote is saved and run under:
// devin-remote, or devin-remote.exe for Windows.
func ExecName(suffix string) string {
	if strings.HasSuffix(suffix, exeSuffix) {
		return RemoteName + exeSuffix
	}
	return RemoteName
}

// CheckLine is the content of a .sha256 file: the hex SHA-256, two spaces
// and the binary's ExecName, then a newline, so that `sha256sum -c` accepts
// it once the binary is saved under that name.
func CheckLine(sum, suffix string) string { return sum + "  " + ExecName(suffix) + "\n" }

// ParseCheckLine returns the hex SHA-256 of a .sha256 file's first line
// (whatever file name follows it).
func ParseCheckLine(b []byte) (string, error) {
	line, _, _ := strings.Cut(string(b), "\n")
	sum, _, _ := strings.Cut(strings.TrimSpace(line), " ")
	sum = strings.ToLower(sum)
	if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
		return "", fmt.Errorf("the check line %q does not start with a hex SHA-256", truncate(line, 100))
	}
	return sum, nil
}

// Kinds of published names.
const (
	KindLatest   = "latest"
	KindBinary   = "binary"
	KindChecksum = "checksum"
)

// Name is a parsed published name.
type Name struct {
	Kind   string // KindLatest, KindBinary or KindChecksum
	ID     string // "" for KindLatest
	Suffix string
}

// String is the canonical published name.
func (n Name) String() string {
	switch n.Kind {
	case KindLatest:
		return LatestName(n.Suffix)
	case KindChecksum:
		return ChecksumName(n.ID, n.Suffix)
	default:
		return BinaryName(n.ID, n.Suffix)
	}
}

// ParseName parses a published name. It accepts only the layout's names
// with a valid id and a known suffix (and latest_windows_x64 and
// latest_windows_arm64 for the Windows pointers), so a parsed name is always
// a plain file name.
func ParseName(s string) (Name, bool) {
	if rest, ok := strings.CutPrefix(s, latestPrefix); ok {
		if strings.HasPrefix(rest, "windows_") && !strings.HasSuffix(rest, exeSuffix) {
			rest += exeSuffix
		}
		return Name{Kind: KindLatest, Suffix: rest}, ValidSuffix(rest)
	}
	rest, ok := strings.CutPrefix(s, binaryPrefix)
	if !ok {
		return Name{}, false
	}
	kind := KindBinary
	if r, ok := strings.CutSuffix(rest, checksumSuffix); ok {
		kind, rest = KindChecksum, r
	}
	id, suffix, ok := strings.Cut(rest, "_")
	if !ok || !ValidID(id) || !ValidSuffix(suffix) {
		return Name{}, false
	}
	return Name{Kind: kind, ID: id, Suffix: suffix}, true
}

// IsRemoteName reports whether a program invoked as argv0 should behave as
// `outpost remote`: its base name is devin-remote, devin-remote.exe, or a
// published binary name (devin-remote_<id>_<platform>).
func IsRemoteName(argv0 string) bool {
	base := filepath.Base(argv0)
	if i := strings.LastIndexAny(base, `/\`); i >= 0 {
		base = base[i+1:] // a Windows path seen elsewhere
	}
	if base == RemoteName || strings.EqualFold(base, RemoteName+exeSuffix) {
		return true
	}
	n, ok := ParseName(base)
	return ok && n.Kind == KindBinary
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
