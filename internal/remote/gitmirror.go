package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/outpost-sh/outpost/api"
)

// mirror brings the mirror of url up to date and returns its path, or ""
// when mirrors are off or the mirror cannot be had (the clone then goes to
// the remote as usual: a mirror only makes clones faster).
func (g *git) mirror(ctx context.Context, url string) string {
	root := os.Getenv(api.EnvGitMirrors.Name)
	if root == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(url))
	path := filepath.Join(root, hex.EncodeToString(sum[:8])+".git")
	if _, err := os.Stat(path); err == nil {
		if err := g.run(ctx, path, "fetch", "--prune", "--quiet", "origin", "+refs/*:refs/*"); err != nil {
			return path // stale objects still help
		}
		return path
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return ""
	}
	// Clone beside it and rename, so a concurrent clone never sees half a mirror.
	tmp, err := os.MkdirTemp(root, ".mirror-")
	if err != nil {
		return ""
	}
	defer os.RemoveAll(tmp)
	if err := g.run(ctx, "", "clone", "--mirror", "--quiet", "--", url, tmp); err != nil {
		return ""
	}
	if err := os.Rename(tmp, path); err != nil {
		if _, statErr := os.Stat(path); statErr == nil {
			return path // another clone won the race
		}
		return ""
	}
	return path
}
