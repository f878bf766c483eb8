package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/internal/atomicfile"
)

// A repository under repos/ is kept between sessions for its object store
// only: resetRepo leaves it checked out, detached, at the remote's default
// branch as last fetched (refs/remotes/origin/HEAD), with no local branch,
// tag, stash, reflog, hook, index or configuration of its own (the
// configuration is written anew with just the origin remote, whose
// remote-tracking branches stay so that the next fetch sends only what is
// new). The next session's git_clone then fetches and checks out its ref
// as it would in a fresh clone, and nothing the previous session set up in
// .git runs in the next one. Objects the previous session made (commits it
// did not push) stay in the object store, reachable from no ref.

// gitDirKeep are the entries of .git that survive resetRepo; the
// configuration and HEAD are written anew, refs pruned.
var gitDirKeep = []string{"objects", "config", "HEAD", "refs", "packed-refs"}

// keptRefs is the prefix of the refs that survive resetRepo.
const keptRefs = "refs/remotes/origin/"

// keptConfig are the configuration keys resetRepo carries over, with the
// values each may take.
var keptConfig = map[string][]string{
	"core.repositoryformatversion": {"0", "1"},
	"extensions.objectformat":      {"sha1", "sha256"},
	"core.filemode":                {"true", "false"},
	"core.symlinks":                {"true", "false"},
	"core.ignorecase":              {"true", "false"},
	"core.precomposeunicode":       {"true", "false"},
}

// resetRepo resets the repository at dir (see above), or returns why it
// cannot, in which case the caller removes it.
func resetRepo(ctx context.Context, dir string) error {
	gitDir := filepath.Join(dir, ".git")
	if err := plainGitDir(gitDir); err != nil {
		return err
	}
	cfg, err := readGitConfig(ctx, gitDir)
	if err != nil {
		return err
	}
	// From here on git reads only the configuration written here.
	if err := atomicfile.Write(filepath.Join(gitDir, "config"), cfg, 0o644); err != nil {
		return fmt.Errorf("write .git/config: %w", err)
	}
	if err := clearGitDir(gitDir); err != nil {
		return err
	}
	target, err := gitOutput(ctx, dir, "rev-parse", "--verify", "--quiet", keptRefs+"HEAD^{commit}")
	if err != nil {
		return fmt.Errorf("find the remote's default branch (%sHEAD): %w", keptRefs, err)
	}
	if err := atomicfile.Write(filepath.Join(gitDir, "HEAD"), []byte(target+"\n"), 0o644); err != nil {
		return fmt.Errorf("write HEAD: %w", err)
	}
	refs, err := gitOutput(ctx, dir, "for-each-ref", "--format=%(refname)")
	if err != nil {
		return err
	}
	var del strings.Builder
	for _, ref := range strings.Split(refs, "\n") {
		if ref != "" && !strings.HasPrefix(ref, keptRefs) {
			fmt.Fprintf(&del, "delete %s\n", ref)
		}
	}
	if del.Len() > 0 {
		if _, err := gitInput(ctx, dir, del.String(), "update-ref", "--no-deref", "--stdin"); err != nil {
			return err
		}
	}
	// Without an index every tracked file is written again, so a tracked
	// file changed behind an index doctored to hide it is restored too.
	if _, err := gitOutput(ctx, dir, "reset", "--hard", "--quiet", "HEAD"); err != nil {
		return err
	}
	if _, err := gitOutput(ctx, dir, "clean", "-ffdxq"); err != nil {
		return err
	}
	return nil
}

// plainGitDir checks that gitDir is a repository git_clone could have
// made: a directory, with none of its parts a symbolic link or pointing
// elsewhere.
func plainGitDir(gitDir string) error {
	for _, name := range []string{"", "objects", "refs", "HEAD", "config", "packed-refs", "index", "commondir", "objects/info"} {
		fi, err := os.Lstat(filepath.Join(gitDir, name))
		switch {
		case errors.Is(err, os.ErrNotExist) && (name == "packed-refs" || name == "index" || name == "commondir" || name == "objects/info"):
			continue
		case err != nil:
			return fmt.Errorf("not a repository git_clone made: %w", err)
		case name == "commondir":
			return errors.New("a linked worktree, not a repository git_clone made")
		case fi.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link", filepath.Join(".git", name))
		case (name == "" || name == "objects" || name == "refs" || name == "objects/info") != fi.IsDir():
			return fmt.Errorf("%s has the wrong type", filepath.Join(".git", name))
		}
	}
	return nil
}

// readGitConfig reads the repository's configuration file alone (no
// includes, nothing run) and returns a new one holding only the keys of
// keptConfig and the origin remote's URL.
func readGitConfig(ctx context.Context, gitDir string) ([]byte, error) {
	out, err := gitOutput(ctx, "", "config", "--file", filepath.Join(gitDir, "config"), "--no-includes", "--list", "-z")
	if err != nil {
		return nil, fmt.Errorf("read .git/config: %w", err)
	}
	kept := map[string]string{}
	url := ""
	for _, entry := range strings.Split(out, "\x00") {
		// git spells section and key names in lower case, subsections as
		// they are.
		key, value, _ := strings.Cut(entry, "\n")
		switch {
		case key == "remote.origin.url":
			url = value
		case strings.HasPrefix(key, "extensions.") && key != "extensions.objectformat":
			return nil, fmt.Errorf("the repository uses the extension %s", key)
		case slices.Contains(keptConfig[key], strings.ToLower(value)):
			kept[key] = strings.ToLower(value)
		}
	}
	if url == "" || strings.ContainsFunc(url, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, errors.New("the repository has no usable origin remote")
	}
	version := kept["core.repositoryformatversion"]
	if version == "" {
		version = "0"
	}
	if _, ok := kept["extensions.objectformat"]; ok && version != "1" {
		return nil, errors.New("extensions.objectformat needs core.repositoryformatversion 1")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "[core]\n\trepositoryformatversion = %s\n\tbare = false\n\tlogallrefupdates = true\n", version)
	for _, k := range []string{"filemode", "symlinks", "ignorecase", "precomposeunicode"} {
		if v, ok := kept["core."+k]; ok {
			fmt.Fprintf(&b, "\t%s = %s\n", k, v)
		}
	}
	if v, ok := kept["extensions.objectformat"]; ok {
		fmt.Fprintf(&b, "[extensions]\n\tobjectformat = %s\n", v)
	}
	fmt.Fprintf(&b, "[remote \"origin\"]\n\turl = %s\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n", quoteConfig(url))
	return b.Bytes(), nil
}

// quoteConfig quotes v as a git configuration value.
func quoteConfig(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// clearGitDir removes every entry of gitDir but gitDirKeep, and the
// alternates that would make it read objects from elsewhere.
func clearGitDir(gitDir string) error {
	entries, err := os.ReadDir(gitDir)
	if err != nil {
		return fmt.Errorf("read .git: %w", err)
	}
	for _, e := range entries {
		if slices.Contains(gitDirKeep, e.Name()) {
			continue
		}
		if err := removeAll(filepath.Join(gitDir, e.Name())); err != nil {
			return err
		}
	}
	for _, name := range []string{"alternates", "http-alternates"} {
		if err := os.Remove(filepath.Join(gitDir, "objects", "info", name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove objects/info/%s: %w", name, err)
		}
	}
	return nil
}

// gitOutput runs git in the work tree dir (its .git named explicitly, so
// nothing is discovered elsewhere) with hooks and fsmonitor off, and
// returns its trimmed standard output. With dir empty it runs outside any
// repository.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	return gitInput(ctx, dir, "", args...)
}

// gitInput is gitOutput with stdin as git's standard input.
func gitInput(ctx context.Context, dir, stdin string, args ...string) (string, error) {
	base := []string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "safe.directory=*"}
	cmd := exec.CommandContext(ctx, "git", append(base, args...)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	if dir != "" {
		cmd.Dir = dir
		cmd.Env = append(cmd.Env, "GIT_DIR="+filepath.Join(dir, ".git"), "GIT_WORK_TREE="+dir)
	} else {
		cmd.Dir = os.TempDir()
	}
	var out, errb bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
