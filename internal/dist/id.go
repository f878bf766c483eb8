package dist

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// buildID, when set at build time to a valid version id, is this build's
// id:
//
//	go build -ldflags "-X github.com/outpost-sh/outpost/internal/dist.buildID=1a2b3c4d5e6f" ./cmd/outpost
//
// `make build` and `make dist` set it (scripts/dist.sh id).
var buildID string

// idLen is how many hex digits of a commit or a hash make an id.
const idLen = 12

// SelfID returns this build's version id, computed once:
//   - the id set at build time (buildID), when valid;
//   - else the first 12 hex digits of the VCS revision Go recorded, when
//     the build was of an unmodified tree;
//   - else the first 12 hex digits of the SHA-256 of this executable, which
//     is stable for a build and differs between builds.
//
// All three match ^[0-9a-f]{6,40}$.
func SelfID() (string, error) { return selfID() }

var selfID = sync.OnceValues(func() (string, error) {
	if id := idFromBuild(buildID, debug.ReadBuildInfo); id != "" {
		return id, nil
	}
	exe, err := executable()
	if err != nil {
		return "", fmt.Errorf("find this executable to compute its version id: %w", err)
	}
	sum, err := FileSHA256(exe)
	if err != nil {
		return "", fmt.Errorf("compute the version id of %s: %w", exe, err)
	}
	return sum[:idLen], nil
})

// idFromBuild is the id of the build-time variable or of the VCS revision,
// or "" when neither gives one.
func idFromBuild(set string, info func() (*debug.BuildInfo, bool)) string {
	if ValidID(set) {
		return set
	}
	bi, ok := info()
	if !ok {
		return ""
	}
	var rev string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = strings.ToLower(s.Value)
		case "vcs.modified":
			if s.Value == "true" {
				return "" // not the commit's build
			}
		}
	}
	if len(rev) >= idLen && ValidID(rev[:idLen]) {
		return rev[:idLen]
	}
	return ""
}

// executable returns a path to read this process's executable from. On
// Linux that is /proc/self/exe, which stays the running build even when the
// file it was started from is replaced by an upgrade.
func executable() (string, error) {
	if runtime.GOOS == "linux" {
		if f, err := os.Open("/proc/self/exe"); err == nil {
			f.Close()
			return "/proc/self/exe", nil
		}
	}
	return os.Executable()
}

// FileSHA256 returns the hex SHA-256 of a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return readerSHA256(f)
}

func readerSHA256(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
