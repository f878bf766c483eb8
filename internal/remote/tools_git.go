package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/gitmirror"
	"github.com/outpost-sh/outpost/internal/lazyregexp"
)

var (
	repoNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	shaRE      = lazyregexp.New(`^[0-9a-fA-F]{7,40}$`)
)

func runGitClone(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GitCloneArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.URL == "" {
		return nil, errors.New("bad arguments: url is required")
	}
	if strings.HasPrefix(a.URL, "-") {
		return nil, fmt.Errorf("bad arguments: url %q must not start with '-'", a.URL)
	}
	if !repoNameRE.MatchString(a.Name) || a.Name == "." || a.Name == ".." {
		return nil, fmt.Errorf("bad arguments: repo name %q must start with a letter or digit and hold only letters, digits, '.', '_' and '-'", a.Name)
	}
	if strings.HasPrefix(a.Ref, "-") {
		return nil, fmt.Errorf("bad arguments: ref %q must not start with '-'", a.Ref)
	}
	g := &git{c: c}
	dir := filepath.Join(c.workDir, "repos", a.Name)
	res := api.GitCloneResult{Path: dir}

	if isGitRepo(ctx, g, dir) {
		res.Reused = true
		// A clone another session left (a worker that keeps its workspace)
		// is the cache of this one, not its starting point: its
		// uncommitted edits are stashed away and its branches follow
		// origin, so this session gets the ref's clean tree. The session
		// that made the clone keeps its own edits.
		previous, inherited := cloneOwner(dir), false
		if previous != c.session {
			inherited = true
			if err := g.stashLeftovers(ctx, dir, previous); err != nil {
				return nil, err
			}
		}
		if err := g.run(ctx, dir, "remote", "set-url", "origin", a.URL); err != nil {
			return nil, err
		}
		if err := g.run(ctx, dir, "fetch", "--prune", "--tags", "origin"); err != nil {
			return nil, err
		}
		ref := a.Ref
		if ref == "" {
			ref = g.defaultBranchIfDetached(ctx, dir)
		}
		if ref != "" {
			if err := g.checkout(ctx, dir, ref); err != nil {
				return nil, err
			}
			// A branch that tracks origin moves to what was just fetched;
			// in an inherited clone it drops what the previous session
			// committed and did not push (the commits stay in the object
			// store and the branch's reflog).
			if _, err := g.output(ctx, dir, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}"); err == nil {
				update := []string{"merge", "--ff-only", "@{upstream}"}
				if inherited {
					update = []string{"reset", "--hard", "--quiet", "@{upstream}"}
				}
				if err := g.run(ctx, dir, update...); err != nil {
					return nil, err
				}
			}
		}
		if err := setCloneOwner(dir, c.session); err != nil {
			return nil, err
		}
	} else {
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("git_clone: %s exists and is not a git repository; pick another name or remove it", dir)
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, fmt.Errorf("git_clone: %w", err)
		}
		clone := []string{"clone"}
		if mirror := g.mirror(a.URL); mirror != "" {
			// Objects come from the local mirror, read-only, and the rest
			// from a.URL, so the clone has the newest commits however old
			// the mirror is; --dissociate makes it independent of the
			// mirror. Nothing in the mirror's configuration runs.
			clone = append(gitmirror.ReadArgs(mirror), "clone", "--reference-if-able", mirror, "--dissociate")
			res.Mirror = mirror
		}
		if a.Ref != "" && !shaRE.MatchString(a.Ref) {
			if err := g.run(ctx, "", append(clone, "--branch", a.Ref, "--", a.URL, dir)...); err != nil {
				return nil, missingLocalRepo(a.URL, err)
			}
		} else {
			if err := g.run(ctx, "", append(clone, "--", a.URL, dir)...); err != nil {
				return nil, missingLocalRepo(a.URL, err)
			}
			if a.Ref != "" {
				if err := g.checkout(ctx, dir, a.Ref); err != nil {
					return nil, err
				}
			}
		}
	}
	if !res.Reused {
		if err := setCloneOwner(dir, c.session); err != nil {
			return nil, err
		}
	}
	head, err := g.output(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	res.Head = head
	return res, nil
}

// cloneOwnerFile, in a clone's .git, names the session that cloned or last
// took over the repository.
const cloneOwnerFile = "outpost-session"

// cloneOwner is the session named in dir's cloneOwnerFile, "" when none is.
func cloneOwner(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, ".git", cloneOwnerFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// setCloneOwner records session as the owner of the clone at dir.
func setCloneOwner(dir, session string) error {
	if session == "" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, ".git", cloneOwnerFile), []byte(session+"\n"), 0o644); err != nil {
		return fmt.Errorf("git_clone: record the clone's session: %w", err)
	}
	return nil
}

// stashLeftovers stashes the uncommitted changes and untracked files that
// the session previous (unknown when "") left in the clone at dir, and
// says so on the call's output. Ignored files (build caches) stay. The
// stash keeps the changes recoverable: nothing a session wrote is deleted.
func (g *git) stashLeftovers(ctx context.Context, dir, previous string) error {
	status, err := g.output(ctx, dir, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return err
	}
	if status == "" {
		return nil
	}
	who := "an earlier user of the workspace"
	if previous != "" {
		who = "session " + previous
	}
	msg := "outpost: uncommitted changes left by " + who
	// The stash commit needs an identity; the session's git configuration
	// may have none.
	if err := g.run(ctx, dir, "-c", "user.name=Outpost", "-c", "user.email=outpost@localhost",
		"stash", "push", "--include-untracked", "--quiet", "-m", msg); err != nil {
		return fmt.Errorf("git_clone: put aside the changes %s left in %s: %w", who, dir, err)
	}
	fmt.Fprintf(g.c.stderr, "%s held uncommitted changes left by %s; they are stashed (git stash list: %q) and this session starts from a clean tree\n",
		dir, who, msg)
	return nil
}

// missingLocalRepo adds to err, a failed clone of url, why a local path
// may not be there: a worker's sandbox does not show it.
func missingLocalRepo(url string, err error) error {
	p := strings.TrimPrefix(url, "file://")
	if !filepath.IsAbs(p) {
		return err
	}
	if _, serr := os.Stat(p); !errors.Is(serr, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w: %s does not exist on this machine (a worker that sandboxes sessions with bwrap shows them only its workspace, "+
		"the session's state dir and the system directories: keep the repository in the workspace, bind its directory with the worker's --bwrap-ro-bind, or clone from a URL)", err, p)
}

func isGitRepo(ctx context.Context, g *git, dir string) bool {
	if _, err := os.Stat(dir); err != nil {
		return false
	}
	top, err := g.output(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return false
	}
	// dir must be the top of its own repository, not inside the workspace's.
	want, err1 := filepath.EvalSymlinks(dir)
	got, err2 := filepath.EvalSymlinks(top)
	return err1 == nil && err2 == nil && want == got
}

// git runs git for a call, streaming its output as the call's output.
type git struct{ c *callEnv }

func (g *git) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", append(gitCredentialArgs(g.c), args...)...)
	cmd.Dir = dir
	if dir == "" {
		cmd.Dir = g.c.workDir
	}
	cmd.Env = mergeEnv(g.c.env, map[string]string{"GIT_TERMINAL_PROMPT": "0"})
	cmd.WaitDelay = pipeWaitDelay
	killProcessGroup(cmd)
	return cmd
}

// run runs git, streaming stdout and stderr.
func (g *git) run(ctx context.Context, dir string, args ...string) error {
	cmd := g.command(ctx, dir, args...)
	cmd.Stdout = g.c.stdout
	cmd.Stderr = g.c.stderr
	fmt.Fprintf(g.c.stderr, "$ git %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %w", gitVerb(args), err)
	}
	return nil
}

// gitVerb is git's subcommand in args, after any -c options.
func gitVerb(args []string) string {
	for len(args) > 2 && args[0] == "-c" {
		args = args[2:]
	}
	return args[0]
}

// output runs git quietly and returns its trimmed stdout.
func (g *git) output(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := g.command(ctx, dir, args...)
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// defaultBranchIfDetached returns the remote's default branch when dir has
// no branch checked out, as a repository the worker reset between sessions
// has, so that git_clone without a ref lands where a fresh clone would;
// "" otherwise, or when the remote does not say.
func (g *git) defaultBranchIfDetached(ctx context.Context, dir string) string {
	if _, err := g.output(ctx, dir, "symbolic-ref", "--quiet", "HEAD"); err == nil {
		return ""
	}
	if _, err := g.output(ctx, dir, "remote", "set-head", "origin", "--auto"); err != nil {
		return ""
	}
	head, err := g.output(ctx, dir, "symbolic-ref", "--quiet", "--short", "refs/remotes/origin/HEAD")
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(head, "origin/")
}

// checkout checks out ref, fetching it by name when the clone lacks it (a
// commit not on any branch, a pull request ref).
func (g *git) checkout(ctx context.Context, dir, ref string) error {
	if _, err := g.output(ctx, dir, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err == nil {
		return g.run(ctx, dir, "checkout", "--quiet", ref, "--")
	}
	if _, err := g.output(ctx, dir, "rev-parse", "--verify", "--quiet", "origin/"+ref+"^{commit}"); err == nil {
		return g.run(ctx, dir, "checkout", "--quiet", "-b", ref, "--track", "origin/"+ref)
	}
	if err := g.run(ctx, dir, "fetch", "origin", ref); err != nil {
		return fmt.Errorf("git_clone: ref %q not found: %w", ref, err)
	}
	return g.run(ctx, dir, "checkout", "--quiet", "--detach", "FETCH_HEAD")
}
