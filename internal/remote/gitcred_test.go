package remote

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// credFill runs the helper as git would for get, with the given request.
func credFill(t *testing.T, stateDir, request string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(stateDir, gitCredHelperName), "get")
	cmd.Stdin = strings.NewReader(request)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	return string(out)
}

func TestGitCredentialHelper(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("sh not installed")
	}
	state := filepath.Join(t.TempDir(), "state dir's") // spaces and quotes in the path
	secrets := map[string]string{
		"GIT_TOKEN_GITHUB_COM":     "ghp_host",
		"GIT_TOKEN_MY_GIT_EXAMPLE": "tok-mygit",
		"GIT_TOKEN_127_0_0_1_8080": "tok-port",
		"GIT_TOKEN":                "tok-any",
		"GIT_TOKEN_BAD":            "has space",
		"OTHER":                    "not-a-git-token",
	}
	err := writeGitCredentials(state, secrets)
	if err == nil || !strings.Contains(err.Error(), "GIT_TOKEN_BAD") || strings.Contains(err.Error(), "has space") {
		t.Errorf("err = %v, want GIT_TOKEN_BAD named, its value not", err)
	}
	for name, mode := range map[string]os.FileMode{gitCredHelperName: 0o700, gitCredFileName: 0o600} {
		fi, err := os.Stat(filepath.Join(state, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode = %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	script, _ := os.ReadFile(filepath.Join(state, gitCredHelperName))
	if strings.Contains(string(script), "ghp_host") {
		t.Error("the helper script holds a token")
	}
	creds, _ := os.ReadFile(filepath.Join(state, gitCredFileName))
	if strings.Contains(string(creds), "not-a-git-token") || strings.Contains(string(creds), "has space") {
		t.Errorf("credential file holds other secrets: %q", creds)
	}

	for _, tc := range []struct{ req, want string }{
		{"protocol=https\nhost=github.com\n\n", "ghp_host"},
		{"protocol=https\nhost=GitHub.com\npath=o/r.git\n", "ghp_host"},
		{"protocol=http\nhost=my-git.example\n", "tok-mygit"},
		{"protocol=http\nhost=127.0.0.1:8080\n", "tok-port"},
		{"protocol=http\nhost=127.0.0.1:9090\n", ""}, // no token for the host, and GIT_TOKEN is for https only
		{"protocol=https\nhost=gitlab.com\n", "tok-any"},
		{"protocol=https\n", ""},
	} {
		got := credFill(t, state, tc.req)
		want := ""
		if tc.want != "" {
			want = "username=" + gitTokenUser + "\npassword=" + tc.want + "\n"
		}
		if got != want {
			t.Errorf("get %q = %q, want %q", tc.req, got, want)
		}
	}
	// store and erase change nothing.
	cmd := exec.Command(filepath.Join(state, gitCredHelperName), "erase")
	cmd.Stdin = strings.NewReader("protocol=https\nhost=github.com\npassword=ghp_host\n\n")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("erase: %v %q", err, out)
	}
	if got := credFill(t, state, "protocol=https\nhost=github.com\n"); !strings.Contains(got, "ghp_host") {
		t.Errorf("after erase, get = %q", got)
	}

	// Rewritten at the next welcome: a token removed is gone.
	if err := writeGitCredentials(state, map[string]string{"GIT_TOKEN_GITHUB_COM": "ghp_new"}); err != nil {
		t.Fatal(err)
	}
	if got := credFill(t, state, "protocol=https\nhost=gitlab.com\n"); got != "" {
		t.Errorf("removed GIT_TOKEN still answered: %q", got)
	}
	if got := credFill(t, state, "protocol=https\nhost=github.com\n"); !strings.Contains(got, "ghp_new") {
		t.Errorf("get after rewrite = %q", got)
	}

	// Without a state dir, or before welcome, git gets no helper.
	if args := gitCredentialArgs(&callEnv{}); args != nil {
		t.Errorf("args without state dir = %v", args)
	}
	if args := gitCredentialArgs(&callEnv{stateDir: t.TempDir()}); args != nil {
		t.Errorf("args before welcome = %v", args)
	}
	args := gitCredentialArgs(&callEnv{stateDir: state})
	if len(args) != 4 || args[1] != "credential.helper=" || !strings.HasPrefix(args[3], "credential.helper=!'") {
		t.Errorf("args = %v", args)
	}
	// No git token: no helper, so the user's own helpers still serve.
	empty := t.TempDir()
	if err := writeGitCredentials(empty, map[string]string{"OTHER": "x"}); err != nil {
		t.Fatal(err)
	}
	if args := gitCredentialArgs(&callEnv{stateDir: empty}); args != nil {
		t.Errorf("args without tokens = %v", args)
	}
}

func TestGitTokenSecretFor(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"github.com":         "GIT_TOKEN_GITHUB_COM",
		"127.0.0.1:8080":     "GIT_TOKEN_127_0_0_1",
		"git.my-corp.io":     "GIT_TOKEN_GIT_MY_CORP_IO",
		"GitLab.Example.Com": "GIT_TOKEN_GITLAB_EXAMPLE_COM",
	} {
		if got := gitTokenSecretFor(host); got != want {
			t.Errorf("gitTokenSecretFor(%q) = %q, want %q", host, got, want)
		}
	}
}

func TestWelcomeWritesGitCredentials(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	s := &session{opts: Options{StateDir: state}, log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	s.welcome(api.Frame{Secrets: map[string]string{"GIT_TOKEN": "tok-welcome"}})
	b, err := os.ReadFile(filepath.Join(state, gitCredFileName))
	if err != nil || string(b) != "* tok-welcome\n" {
		t.Errorf("credential file = %q, %v", b, err)
	}
	if args := gitCredentialArgs(&callEnv{stateDir: state}); len(args) == 0 {
		t.Error("no helper after welcome")
	}
}
