package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/outpost-sh/outpost/api"
)

func init() {
	tools[api.ToolGitStatus] = runGitStatus
	tools[api.ToolGitDiff] = runGitDiff
	tools[api.ToolGitCheckout] = runGitCheckout
	tools[api.ToolGitCommit] = runGitCommit
	tools[api.ToolGitPush] = runGitPush
}

const (
	// gitDiffMax bounds the diff git_diff returns.
	gitDiffMax = 256 << 10
	// gitStatusMaxFiles bounds the files git_status lists.
	gitStatusMaxFiles = 1000
	// Author and committer of git_commit when the session sets none.
	gitDefaultName  = "Outpost Agent"
	gitDefaultEmail = "agent@outpost.invalid"
)

// openRepo checks that repo names a clone under repos/ and returns a git
// runner and the clone's directory.
func openRepo(ctx context.Context, c *callEnv, tool, repo string) (*git, string, error) {
	if !repoNameRE.MatchString(repo) || repo == "." || repo == ".." {
		return nil, "", fmt.Errorf("bad arguments: repo name %q must start with a letter or digit and hold only letters, digits, '.', '_' and '-'", repo)
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, "", fmt.Errorf("%s: git is not installed on this machine (not found on PATH); install it (e.g. apt-get install git, brew install git)", tool)
	}
	g := &git{c: c}
	dir := filepath.Join(c.workDir, "repos", repo)
	if !isGitRepo(ctx, g, dir) {
		return nil, "", fmt.Errorf("%s: no clone at repos/%s; clone it first with git_clone", tool, repo)
	}
	return g, dir, nil
}

// checkPaths refuses paths that git would read as options.
func checkPaths(paths []string) error {
	for _, p := range paths {
		if p == "" {
			return errors.New("bad arguments: paths must not hold an empty path")
		}
	}
	return nil
}

// gitRun runs git in dir with extra environment, streaming its output as the
// call's; a failure's error ends with the last lines git wrote to stderr.
func gitRun(ctx context.Context, g *git, dir string, env map[string]string, args ...string) error {
	cmd := g.command(ctx, dir, args...)
	if len(env) > 0 {
		cmd.Env = mergeEnv(cmd.Env, env)
	}
	tail := &tailBuffer{}
	cmd.Stdout = g.c.stdout
	cmd.Stderr = teeWriter{g.c.stderr, tail}
	fmt.Fprintf(g.c.stderr, "$ git %s\n", strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %w%s", args[0], err, lastLines(tail.String(), 3))
	}
	return nil
}

type teeWriter struct {
	a   *streamWriter
	buf *tailBuffer
}

func (w teeWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	return w.a.Write(p)
}

// lastLines returns ": " and the last n non-empty lines of s, joined by
// "; ", or "" when s has none.
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return ": " + strings.Join(lines[max(0, len(lines)-n):], "; ")
}

// currentBranch returns the checked-out branch, or "" when HEAD is detached.
func currentBranch(ctx context.Context, g *git, dir string) string {
	b, err := g.output(ctx, dir, "symbolic-ref", "--quiet", "--short", "HEAD")
	if err != nil {
		return ""
	}
	return b
}

func runGitStatus(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GitStatusArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	g, dir, err := openRepo(ctx, c, api.ToolGitStatus, a.Repo)
	if err != nil {
		return nil, err
	}
	cmd := g.command(ctx, dir, "status", "--porcelain=v2", "--branch", "-z")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git status: %w%s", err, lastLines(errb.String(), 3))
	}
	return parseGitStatus(out.String()), nil
}

// parseGitStatus parses `git status --porcelain=v2 --branch -z`.
func parseGitStatus(s string) api.GitStatusResult {
	res := api.GitStatusResult{Files: []api.GitFileStatus{}}
	entries := strings.Split(s, "\x00")
	add := func(f api.GitFileStatus) {
		if len(res.Files) >= gitStatusMaxFiles {
			res.Truncated = true
			return
		}
		res.Files = append(res.Files, f)
	}
	changed := false
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if e == "" {
			continue
		}
		switch e[0] {
		case '#':
			f := strings.Fields(e)
			if len(f) < 3 {
				continue
			}
			switch f[1] {
			case "branch.oid":
				if f[2] != "(initial)" {
					res.Head = f[2]
				}
			case "branch.head":
				if f[2] != "(detached)" {
					res.Branch = f[2]
				}
			case "branch.upstream":
				res.Upstream = f[2]
			case "branch.ab":
				if len(f) >= 4 {
					res.Ahead, _ = strconv.Atoi(strings.TrimPrefix(f[2], "+"))
					res.Behind, _ = strconv.Atoi(strings.TrimPrefix(f[3], "-"))
				}
			}
		case '1':
			if f := strings.SplitN(e, " ", 9); len(f) == 9 && len(f[1]) == 2 {
				changed = true
				add(api.GitFileStatus{Path: f[8], Index: f[1][:1], Worktree: f[1][1:], Kind: "changed"})
			}
		case '2':
			if f := strings.SplitN(e, " ", 10); len(f) == 10 && len(f[1]) == 2 {
				changed = true
				fs := api.GitFileStatus{Path: f[9], Index: f[1][:1], Worktree: f[1][1:], Kind: "renamed"}
				if i+1 < len(entries) {
					i++
					fs.OrigPath = entries[i]
				}
				add(fs)
			}
		case 'u':
			if f := strings.SplitN(e, " ", 11); len(f) == 11 && len(f[1]) == 2 {
				changed = true
				add(api.GitFileStatus{Path: f[10], Index: f[1][:1], Worktree: f[1][1:], Kind: "unmerged"})
			}
		case '?':
			changed = true
			add(api.GitFileStatus{Path: strings.TrimPrefix(e, "? "), Index: "?", Worktree: "?", Kind: "untracked"})
		case '!':
			add(api.GitFileStatus{Path: strings.TrimPrefix(e, "! "), Index: "!", Worktree: "!", Kind: "ignored"})
		}
	}
	res.Clean = !changed
	return res
}

// boundedBuffer keeps the first limit bytes written to it and counts all.
type boundedBuffer struct {
	buf   bytes.Buffer
	limit int
	total int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	if room := b.limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func runGitDiff(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GitDiffArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if err := checkPaths(a.Paths); err != nil {
		return nil, err
	}
	g, dir, err := openRepo(ctx, c, api.ToolGitDiff, a.Repo)
	if err != nil {
		return nil, err
	}
	args := []string{"diff", "--no-color", "--no-ext-diff"}
	if a.Staged {
		args = append(args, "--cached")
	}
	args = append(append(args, "--"), a.Paths...)
	cmd := g.command(ctx, dir, args...)
	out := &boundedBuffer{limit: gitDiffMax}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git diff: %w%s", err, lastLines(errb.String(), 3))
	}
	d := out.buf.Bytes()
	truncated := out.total > int64(len(d))
	if truncated {
		// Cut at a line end, and never inside a UTF-8 sequence.
		if i := bytes.LastIndexByte(d, '\n'); i > 0 {
			d = d[:i+1]
		}
		for len(d) > 0 && !utf8.Valid(d) {
			d = d[:len(d)-1]
		}
	}
	return api.GitDiffResult{Diff: string(d), Bytes: out.total, Truncated: truncated}, nil
}

func runGitCheckout(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GitCheckoutArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if a.Ref == "" {
		return nil, errors.New("bad arguments: ref is required")
	}
	if strings.HasPrefix(a.Ref, "-") {
		return nil, fmt.Errorf("bad arguments: ref %q must not start with '-'", a.Ref)
	}
	g, dir, err := openRepo(ctx, c, api.ToolGitCheckout, a.Repo)
	if err != nil {
		return nil, err
	}
	switch {
	case a.Create:
		if _, err := g.output(ctx, dir, "check-ref-format", "--branch", a.Ref); err != nil {
			return nil, fmt.Errorf("bad arguments: %q is not a valid branch name", a.Ref)
		}
		if _, err := g.output(ctx, dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+a.Ref); err == nil {
			return nil, fmt.Errorf("git_checkout: branch %q already exists; check it out without create", a.Ref)
		}
		if err := gitRun(ctx, g, dir, nil, "checkout", "--quiet", "-b", a.Ref); err != nil {
			return nil, err
		}
	default:
		if _, err := g.output(ctx, dir, "rev-parse", "--verify", "--quiet", a.Ref+"^{commit}"); err == nil {
			if err := gitRun(ctx, g, dir, nil, "checkout", "--quiet", a.Ref, "--"); err != nil {
				return nil, err
			}
		} else if _, err := g.output(ctx, dir, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/"+a.Ref+"^{commit}"); err == nil {
			if err := gitRun(ctx, g, dir, nil, "checkout", "--quiet", "-b", a.Ref, "--track", "origin/"+a.Ref); err != nil {
				return nil, err
			}
		} else {
			return nil, fmt.Errorf("git_checkout: ref %q not found in repos/%s (fetch it first, e.g. with git_clone and this ref); set create to make a new branch", a.Ref, a.Repo)
		}
	}
	head, err := g.output(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	return api.GitCheckoutResult{Branch: currentBranch(ctx, g, dir), Head: head}, nil
}

// envValue returns the last value of key in env, or "".
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// commitIdentity is the author and committer of a commit: the session's
// GIT_AUTHOR_* (and GIT_COMMITTER_*) when set, else Outpost's.
func commitIdentity(env []string) map[string]string {
	name := cmpOr(envValue(env, "GIT_AUTHOR_NAME"), gitDefaultName)
	email := cmpOr(envValue(env, "GIT_AUTHOR_EMAIL"), gitDefaultEmail)
	return map[string]string{
		"GIT_AUTHOR_NAME":     name,
		"GIT_AUTHOR_EMAIL":    email,
		"GIT_COMMITTER_NAME":  cmpOr(envValue(env, "GIT_COMMITTER_NAME"), name),
		"GIT_COMMITTER_EMAIL": cmpOr(envValue(env, "GIT_COMMITTER_EMAIL"), email),
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func runGitCommit(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GitCommitArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	if strings.TrimSpace(a.Message) == "" {
		return nil, errors.New("bad arguments: message is required")
	}
	if err := checkPaths(a.Paths); err != nil {
		return nil, err
	}
	g, dir, err := openRepo(ctx, c, api.ToolGitCommit, a.Repo)
	if err != nil {
		return nil, err
	}
	if a.All {
		if err := gitRun(ctx, g, dir, nil, "add", "--all"); err != nil {
			return nil, err
		}
	}
	if len(a.Paths) > 0 {
		if err := gitRun(ctx, g, dir, nil, append([]string{"add", "--all", "--"}, a.Paths...)...); err != nil {
			return nil, err
		}
	}
	cmd := g.command(ctx, dir, "diff", "--cached", "--quiet")
	if err := cmd.Run(); err == nil {
		return nil, errors.New("git_commit: nothing to commit: no staged changes (set all, or paths, to stage changes)")
	} else if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		return nil, fmt.Errorf("git diff --cached: %w", err)
	}
	if err := gitRun(ctx, g, dir, commitIdentity(c.env), "commit", "--quiet", "-m", a.Message); err != nil {
		return nil, err
	}
	sha, err := g.output(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.stderr, "committed %s\n", sha)
	return api.GitCommitResult{Commit: sha, Branch: currentBranch(ctx, g, dir)}, nil
}

func runGitPush(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.GitPushArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	remote := cmpOr(a.Remote, "origin")
	if strings.HasPrefix(remote, "-") || strings.ContainsAny(remote, " \t\n") {
		return nil, fmt.Errorf("bad arguments: remote %q must not start with '-' or hold spaces", remote)
	}
	if strings.HasPrefix(a.Branch, "-") {
		return nil, fmt.Errorf("bad arguments: branch %q must not start with '-'", a.Branch)
	}
	g, dir, err := openRepo(ctx, c, api.ToolGitPush, a.Repo)
	if err != nil {
		return nil, err
	}
	branch := a.Branch
	if branch == "" {
		if branch = currentBranch(ctx, g, dir); branch == "" {
			return nil, errors.New("git_push: HEAD is detached; name the branch to push, or make one with git_checkout and create")
		}
	}
	sha, err := g.output(ctx, dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	if err != nil {
		return nil, fmt.Errorf("git_push: no local branch %q in repos/%s", branch, a.Repo)
	}
	remoteURL, err := g.output(ctx, dir, "remote", "get-url", remote)
	if err != nil {
		return nil, fmt.Errorf("git_push: repos/%s has no remote %q", a.Repo, remote)
	}
	args := []string{"push"}
	if a.SetUpstream {
		args = append(args, "--set-upstream")
	}
	args = append(args, remote, "refs/heads/"+branch+":refs/heads/"+branch)
	if err := gitRun(ctx, g, dir, nil, args...); err != nil {
		if isGitAuthError(err.Error()) {
			return nil, gitAuthError(remote, remoteURL, err)
		}
		return nil, err
	}
	return api.GitPushResult{Remote: remote, Branch: branch, Commit: sha}, nil
}

// isGitAuthError tells whether git failed for want of valid credentials.
func isGitAuthError(msg string) bool {
	for _, s := range []string{"could not read Username", "could not read Password", "terminal prompts disabled", "Authentication failed", "The requested URL returned error: 401", "The requested URL returned error: 403", "Permission denied (publickey"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// gitAuthError explains a push refused for credentials, naming the secret
// that would carry the host's token.
func gitAuthError(remote, remoteURL string, err error) error {
	u, perr := url.Parse(remoteURL)
	if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("git_push: %s refused the push for lack of valid credentials; the session's git tokens serve http(s) remotes only: %w", remote, err)
	}
	return fmt.Errorf("git_push: %s (%s) refused the push for lack of valid credentials: give the session a secret %s holding a token allowed to push there (or GIT_TOKEN, used for any https host): %w",
		remote, u.Host, gitTokenSecretFor(u.Host), err)
}
