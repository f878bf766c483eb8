package demo

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

func TestMakeRepo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bare, err := MakeRepo(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "--git-dir", bare, "show", "main:README.md").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "foo") {
		t.Fatalf("README in demo repo: %v %s", err, out)
	}
	again, err := MakeRepo(context.Background(), dir)
	if err != nil || again != bare {
		t.Fatalf("second MakeRepo: %q %v", again, err)
	}
	s := Session("local", bare)
	if s.Repos[0].URL != bare || len(s.Agent.Steps) != 4 {
		t.Fatalf("session %+v", s)
	}
}
