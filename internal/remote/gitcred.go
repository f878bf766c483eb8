package remote

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/gitmirror"
)

// Git credentials come from the session's secrets and never touch a
// repository's config or the workspace: at welcome the remote writes, in its
// state dir, a file mapping hosts to tokens (0600) and a small credential
// helper script (0700) that answers git's "get" from it. Every git command a
// tool runs names the helper with -c credential.helper=…, so nothing is
// written to .git/config.
//
// Secrets read: GIT_TOKEN_<HOST>, HOST being the host name upper-cased with
// every character other than a letter or digit turned into '_' (github.com
// is GIT_TOKEN_GITHUB_COM; a host with a port may be named with or without
// it), and GIT_TOKEN, used for any https host without a token of its own.
const (
	gitCredHelperName = "git-credential-outpost"
	gitCredFileName   = "git-credentials"
	gitTokenSecret    = "GIT_TOKEN"
	// gitTokenUser is the user name sent with a token; GitHub, GitLab and
	// Gitea accept any name with a personal access token.
	gitTokenUser = "x-access-token"
)

// gitCredHelperScript answers "get" for the host git asks about, from the
// credential file %s (shell-quoted). It ignores "store" and "erase".
const gitCredHelperScript = `#!/bin/sh
# Outpost's git credential helper: answers "get" with the session's token for
# the host asked about. Written by outpost remote serve; do not edit.
file=%s
if [ "$1" != get ]; then cat >/dev/null; exit 0; fi
protocol= host=
while IFS= read -r line; do
	case $line in
	'') break ;;
	protocol=*) protocol=${line#protocol=} ;;
	host=*) host=${line#host=} ;;
	esac
done
[ -r "$file" ] && [ -n "$host" ] || exit 0
norm() { printf '%%s' "$1" | tr 'a-z' 'A-Z' | tr -c 'A-Z0-9' '_'; }
tok=
for want in "$(norm "$host")" "$(norm "${host%%:*}")"; do
	while read -r k v; do
		if [ "$k" = "$want" ]; then tok=$v; break; fi
	done <"$file"
	[ -n "$tok" ] && break
done
if [ -z "$tok" ] && [ "$protocol" = https ]; then
	while read -r k v; do
		if [ "$k" = '*' ]; then tok=$v; break; fi
	done <"$file"
fi
[ -n "$tok" ] || exit 0
printf 'username=%s\npassword=%%s\n' "$tok"
`

// gitTokenSecretFor names the secret that holds host's token.
func gitTokenSecretFor(host string) string {
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.Contains(h, "[") {
		host = h
	}
	return gitTokenSecret + "_" + gitmirror.HostKey(host)
}

// writeGitCredentials writes the credential file and helper for secrets in
// stateDir. A token that cannot be written (it holds whitespace) is left out
// and named in the error; the others are written. Errors never hold a token.
func writeGitCredentials(stateDir string, secrets map[string]string) error {
	if stateDir == "" {
		return nil
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("git credentials: %w", err)
	}
	names := make([]string, 0, len(secrets))
	for name := range secrets {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	var bad []string
	for _, name := range names {
		tok := secrets[name]
		var key string
		switch {
		case name == gitTokenSecret:
			key = "*"
		case strings.HasPrefix(name, gitTokenSecret+"_") && len(name) > len(gitTokenSecret)+1:
			key = gitmirror.HostKey(strings.TrimPrefix(name, gitTokenSecret+"_"))
		default:
			continue
		}
		if tok == "" {
			continue
		}
		if strings.ContainsAny(tok, " \t\r\n\v\f") {
			bad = append(bad, name)
			continue
		}
		b.WriteString(key + " " + tok + "\n")
	}
	credFile := filepath.Join(stateDir, gitCredFileName)
	if err := atomicfile.Write(credFile, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("git credentials: %w", err)
	}
	script := fmt.Sprintf(gitCredHelperScript, gitShellQuote(credFile), gitTokenUser)
	if err := atomicfile.Write(filepath.Join(stateDir, gitCredHelperName), []byte(script), 0o700); err != nil {
		return fmt.Errorf("git credentials: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("git credentials: secrets %s hold whitespace and are not used as git tokens", strings.Join(bad, ", "))
	}
	return nil
}

// gitCredentialArgs are the options that make git use the session's
// credential helper, and only it: the helpers of the user's git config are
// dropped, or one of them (store, a keychain) would be asked to keep the
// session's token after a successful push. None when the session has no git
// token (the user's helpers then work as usual) or the remote has not
// written the helper.
func gitCredentialArgs(c *callEnv) []string {
	if c == nil || c.stateDir == "" {
		return nil
	}
	if fi, err := os.Stat(filepath.Join(c.stateDir, gitCredFileName)); err != nil || fi.Size() == 0 {
		return nil
	}
	helper := filepath.Join(c.stateDir, gitCredHelperName)
	if _, err := os.Stat(helper); err != nil {
		return nil
	}
	return []string{"-c", "credential.helper=", "-c", "credential.helper=!" + gitShellQuote(helper)}
}

// gitShellQuote quotes s for sh.
func gitShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
