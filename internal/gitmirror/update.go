package gitmirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/atomicfile"
)

// The worker's side: Prepare at start, Update after each session. Nothing
// here runs inside a sandbox, and everything it reads from a state dir or
// a mirror is treated as written by an adversary.

// credFile is the remote's credential file in its state dir: lines "KEY
// TOKEN", KEY being a host name upper-cased with every character other
// than a letter or digit turned into '_', or "*" for any https host (see
// internal/remote/gitcred.go, which writes it).
const credFile = "git-credentials"

// tokenUser is the user name sent with a token, as the remote's helper does.
const tokenUser = "x-access-token"

// Environment variables that hand the session's token to the worker's
// credential helper, so that it is on no command line.
const (
	envHost  = "OUTPOST_MIRROR_HOST"
	envToken = "OUTPOST_MIRROR_TOKEN"
)

// tokenHelper answers git's "get" with the token for the host the mirror
// is for, and nothing for any other host (a redirect elsewhere).
const tokenHelper = `!f() { test "$1" = get || { cat >/dev/null; exit 0; }; h=; ` +
	`while IFS= read -r l && test -n "$l"; do case $l in host=*) h=${l#host=};; esac; done; ` +
	`test "$h" = "$` + envHost + `" && printf 'username=` + tokenUser + `\npassword=%s\n' "$` + envToken + `"; }; f`

// oldMirrorName matches the mirrors of earlier versions, which sessions
// could write: a worker removes them.
var oldMirrorName = regexp.MustCompile(`^[0-9a-f]{16}\.git$`)

// tmpPrefix starts the name of a mirror being cloned.
const tmpPrefix = ".mirror-"

// staleAfter is the age past which a clone under tmpPrefix is taken for
// one that never finished (a worker killed meanwhile); a younger one may
// be another worker's, sharing the directory, at work.
const staleAfter = time.Hour

// Prepare makes root, the mirrors directory, ready for a worker whose
// sessions must not write it: created if missing, the worker's, mode 0755
// (session code reads mirrors as another user in user isolation), without
// the mirrors of earlier versions, a mirror another user owns, or a clone
// left unfinished.
func Prepare(root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create the git mirrors directory: %w", err)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		return fmt.Errorf("git mirrors directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("git mirrors directory %s is not a directory (a symbolic link?): give the path of a directory", root)
	}
	if !ownedByMe(fi) {
		// An earlier version gave the directory to the run-as user.
		if err := takeBack(root); err != nil {
			return fmt.Errorf("take back the git mirrors directory %s from the user that owns it (sessions must not write it): %w", root, err)
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return fmt.Errorf("git mirrors directory: %w", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("read the git mirrors directory: %w", err)
	}
	for _, e := range entries {
		p := filepath.Join(root, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		stale := oldMirrorName.MatchString(e.Name()) ||
			(strings.HasPrefix(e.Name(), tmpPrefix) && time.Since(fi.ModTime()) > staleAfter) ||
			(strings.HasSuffix(e.Name(), mirrorExt) && (!fi.IsDir() || !ownedByMe(fi)))
		if stale {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove the stale git mirror %s: %w", p, err)
			}
		}
	}
	return nil
}

// TokenFor returns the token the session of stateDir has for rawURL's
// host (the remote's credential file), or "".
func TokenFor(stateDir, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	data, err := readPlain(filepath.Join(stateDir, credFile), 64<<10)
	if err != nil || data == nil {
		return ""
	}
	tokens := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok && v != "" && !strings.ContainsFunc(v, func(r rune) bool { return r <= 0x20 || r == 0x7f }) {
			if _, seen := tokens[k]; !seen {
				tokens[k] = v
			}
		}
	}
	for _, k := range []string{HostKey(u.Host), HostKey(u.Hostname())} {
		if t := tokens[k]; t != "" {
			return t
		}
	}
	if u.Scheme == "https" {
		return tokens["*"]
	}
	return ""
}

// HostKey is host's key in a session's git credential file and the suffix
// of the name of the secret that holds its token (GIT_TOKEN_<KEY>): the
// remote's credential helper and the worker's mirror updates pick a URL's
// token by it, so both pick the same one.
func HostKey(host string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, host)
}

// Update makes the mirror of rawURL under root (which Prepare readied), or
// brings it up to date, fetching with token (the session's for the URL's
// host; "" for none). An existing mirror gets its configuration written
// anew first; one that cannot be made safe is cloned again.
func Update(ctx context.Context, root, rawURL, token string) error {
	path, err := Path(root, rawURL)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return create(ctx, root, path, rawURL, token)
	case err != nil:
		return fmt.Errorf("git mirror: %w", err)
	}
	if !fi.IsDir() || !ownedByMe(fi) {
		return remake(ctx, root, path, rawURL, token)
	}
	if err := sanitize(ctx, path, rawURL); err != nil {
		return remake(ctx, root, path, rawURL, token)
	}
	if _, err := run(ctx, path, token, rawURL, "--git-dir="+path, "fetch", "--prune", "--quiet", "origin"); err != nil {
		return fmt.Errorf("update the git mirror of %s: %w", rawURL, err)
	}
	return nil
}

// remake removes the mirror at path and clones it again.
func remake(ctx context.Context, root, path, rawURL, token string) error {
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove the git mirror %s: %w", path, err)
	}
	return create(ctx, root, path, rawURL, token)
}

// create clones the mirror beside path and renames it into place, so that
// a clone reading mirrors never sees half a one.
func create(ctx context.Context, root, path, rawURL, token string) error {
	tmp, err := os.MkdirTemp(root, tmpPrefix)
	if err != nil {
		return fmt.Errorf("git mirror: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("git mirror: %w", err)
	}
	if _, err := run(ctx, tmp, token, rawURL, "clone", "--mirror", "--quiet", "--", rawURL, tmp); err != nil {
		return fmt.Errorf("make the git mirror of %s: %w", rawURL, err)
	}
	if err := sanitize(ctx, tmp, rawURL); err != nil {
		return fmt.Errorf("make the git mirror of %s: %w", rawURL, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		if Ready(path) {
			return nil // another worker made it meanwhile
		}
		return fmt.Errorf("git mirror: %w", err)
	}
	return nil
}

// gitDirRemove are the entries of a mirror that could make git run a
// program, read objects or history from elsewhere, or cut history short;
// a mirror the worker made has none of them.
var gitDirRemove = []string{"hooks", "commondir", "config.worktree", "shallow", "info/grafts",
	"objects/info/alternates", "objects/info/http-alternates"}

// sanitize checks that the mirror at path has the shape of a bare
// repository and writes its configuration anew: the object format kept,
// the origin remote fixed to rawURL, mirroring every ref; hooks,
// alternates and grafts removed.
func sanitize(ctx context.Context, path, rawURL string) error {
	for _, name := range []string{"objects", "refs", "HEAD", "config"} {
		fi, err := os.Lstat(filepath.Join(path, name))
		if err != nil {
			return fmt.Errorf("not a git mirror: %w", err)
		}
		if fi.Mode()&os.ModeSymlink != 0 || (name == "objects" || name == "refs") != fi.IsDir() {
			return fmt.Errorf("not a git mirror: %s has the wrong type", name)
		}
	}
	// Read as a plain file: no includes, nothing run.
	out, err := run(ctx, "", "", "", "config", "--file", filepath.Join(path, "config"), "--no-includes", "--get-regexp", `^extensions\.`)
	format := ""
	if err == nil {
		for _, l := range strings.Split(out, "\n") {
			k, v, _ := strings.Cut(l, " ")
			switch {
			case k == "":
			case k == "extensions.objectformat" && (v == "sha1" || v == "sha256"):
				format = v
			default:
				return fmt.Errorf("the mirror uses the extension %s", k)
			}
		}
	}
	for _, name := range gitDirRemove {
		if err := os.RemoveAll(filepath.Join(path, name)); err != nil {
			return fmt.Errorf("git mirror: %w", err)
		}
	}
	var b bytes.Buffer
	version := "0"
	if format != "" {
		version = "1"
	}
	fmt.Fprintf(&b, "[core]\n\trepositoryformatversion = %s\n\tbare = true\n\tsharedRepository = 0644\n"+
		"\thooksPath = /dev/null\n\tfsmonitor = false\n", version)
	if format != "" {
		fmt.Fprintf(&b, "[extensions]\n\tobjectformat = %s\n", format)
	}
	fmt.Fprintf(&b, "[remote \"origin\"]\n\turl = %s\n\tfetch = +refs/*:refs/*\n\tmirror = true\n", quoteConfig(rawURL))
	return atomicfile.Write(filepath.Join(path, "config"), b.Bytes(), 0o644)
}

// quoteConfig quotes v as a git configuration value.
func quoteConfig(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// run runs git as the worker with the mirror options (ReadArgs of
// mirror, network protocols only, no credential helper but the session's
// token for rawURL's host) in a clean git environment, and returns its
// trimmed standard output.
func run(ctx context.Context, mirror, token, rawURL string, args ...string) (string, error) {
	base := []string{"-c", "protocol.allow=never", "-c", "protocol.https.allow=always",
		"-c", "protocol.http.allow=always", "-c", "protocol.git.allow=always",
		"-c", "credential.helper=", "-c", "core.sharedRepository=0644"}
	if mirror != "" {
		base = append(ReadArgs(mirror), base...)
	}
	env := gitEnv(os.Environ())
	if token != "" {
		if u, err := url.Parse(rawURL); err == nil {
			base = append(base, "-c", "credential.helper="+tokenHelper)
			env = append(env, envHost+"="+u.Host, envToken+"="+token)
		}
	}
	cmd := exec.CommandContext(ctx, "git", append(base, args...)...)
	cmd.Env = env
	cmd.Dir = os.TempDir()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if token != "" {
			msg = strings.ReplaceAll(msg, token, "[redacted]")
		}
		return "", fmt.Errorf("git %s: %w: %s", args[0], err, msg)
	}
	return strings.TrimSpace(out.String()), nil
}

// gitEnv is env without the git variables that would point git at another
// repository, configuration or program, plus no prompts and none of the
// worker's user's own git configuration (~/.gitconfig): credentials there
// (an extraHeader, a URL rewritten to one with a token) would fetch into a
// mirror every session reads what no session's token reaches, and
// sessions' clones (in a sandbox, or as the run-as user) do not read that
// file either. The system's configuration (proxies, certificates) still
// applies.
func gitEnv(env []string) []string {
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := !strings.HasPrefix(k, "GIT_") || strings.HasPrefix(k, "GIT_SSL_") || strings.HasPrefix(k, "GIT_HTTP_") || strings.HasPrefix(k, "GIT_CURL_")
		if keep && k != "SSH_ASKPASS" && k != envHost && k != envToken && k != "LC_ALL" {
			out = append(out, kv)
		}
	}
	return append(out, "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C")
}
