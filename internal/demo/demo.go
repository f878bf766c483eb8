// Package demo makes the demo that `outpost up` runs: a small git
// repository made on the fly and a script session that clones it, runs a
// command, edits a file and shows the diff.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/outpost-sh/outpost/api"
)

// files are the demo repository's contents.
var files = map[string]string{
	"README.md": "# hello\n\nThis greeting says foo.\n",
	"Makefile":  "test:\n\t@echo \"running tests\"\n\t@grep -q hello README.md && echo \"ok: README mentions hello\"\n",
}

// MakeRepo creates a bare git repository under dir holding a small project
// and returns its path, usable as a clone URL.
func MakeRepo(ctx context.Context, dir string) (string, error) {
	work := filepath.Join(dir, "demo-src")
	bare := filepath.Join(dir, "demo.git")
	if _, err := os.Stat(bare); err == nil {
		return bare, nil
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			return "", fmt.Errorf("demo: %w", err)
		}
	}
	git := func(dir string, args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Outpost Demo", "GIT_AUTHOR_EMAIL=demo@outpost.invalid",
			"GIT_COMMITTER_NAME=Outpost Demo", "GIT_COMMITTER_EMAIL=demo@outpost.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("demo: git %v: %w: %s", args, err, out)
		}
		return nil
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "."},
		{"commit", "-q", "-m", "Initial commit"},
	} {
		if err := git(work, args...); err != nil {
			return "", err
		}
	}
	if err := git(dir, "clone", "-q", "--bare", work, bare); err != nil {
		return "", err
	}
	if err := os.RemoveAll(work); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	return bare, nil
}

// Session is the demo session: clone the repo, run its tests, edit the
// README and show the diff.
func Session(outpost, repoURL string) api.CreateSessionRequest {
	step := func(tool string, args any) api.Step {
		raw, _ := json.Marshal(args)
		return api.Step{Tool: tool, Args: raw}
	}
	return api.CreateSessionRequest{
		Outpost: outpost,
		Title:   "demo: edit a README",
		Prompt:  "Run the tests, change foo to bar in the README and show the diff.",
		Repos:   []api.Repo{{URL: repoURL, Name: "demo", Ref: "main"}},
		Agent: api.Agent{Kind: api.AgentScript, Steps: []api.Step{
			// A worker reuses repos/demo between runs: start from a clean tree.
			step(api.ToolExec, api.ExecArgs{Command: "git checkout -q -- .", Cwd: "repos/demo", TimeoutS: 60}),
			step(api.ToolExec, api.ExecArgs{Command: "make test", Cwd: "repos/demo", TimeoutS: 60}),
			step(api.ToolEditFile, api.EditFileArgs{Path: "repos/demo/README.md", Old: "foo", New: "bar"}),
			step(api.ToolExec, api.ExecArgs{Command: "git --no-pager diff --color=never", Cwd: "repos/demo", TimeoutS: 60}),
		}},
		Env:    map[string]string{"CI": "1"},
		Limits: api.Limits{MaxDurationS: 600},
	}
}
