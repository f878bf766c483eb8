package remote

import (
	"fmt"
	"os"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gitmirror"
)

// mirror returns the worker's mirror of url for a clone to take its
// objects from, or "" when mirrors are off, url is not mirrored, or the
// worker has not made its mirror yet. The remote never writes a mirror:
// it records url in its state dir, and the worker, outside the sandbox,
// makes or updates the mirror after the session (package gitmirror).
func (g *git) mirror(url string) string {
	root := os.Getenv(api.EnvGitMirrors.Name)
	if root == "" {
		return ""
	}
	path, err := gitmirror.Path(root, url)
	if err != nil {
		return ""
	}
	if g.c.stateDir != "" {
		if err := gitmirror.Want(g.c.stateDir, url); err != nil {
			// A mirror only makes clones faster: the clone goes on.
			fmt.Fprintf(g.c.stderr, "outpost: %v\n", err)
		}
	}
	if !gitmirror.Ready(path) {
		return ""
	}
	return path
}
