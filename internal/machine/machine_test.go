package machine

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
)

func TestDetect(t *testing.T) {
	chrome := filepath.Join(t.TempDir(), "chrome")
	if err := os.WriteFile(chrome, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUTPOST_CHROME_PATH", chrome)

	c := Detect(context.Background())
	if c.OS != runtime.GOOS || c.Arch != runtime.GOARCH || c.CPUs < 1 {
		t.Errorf("os/arch/cpus = %q/%q/%d", c.OS, c.Arch, c.CPUs)
	}
	if runtime.GOOS == "linux" && c.MemoryBytes <= 0 {
		t.Errorf("memory = %d, want > 0 on linux", c.MemoryBytes)
	}
	if c.Hostname == "" {
		t.Error("hostname is empty")
	}
	if !strings.HasPrefix(c.Git, "git version") {
		t.Errorf("git = %q", c.Git)
	}
	if c.ChromePath != chrome {
		t.Errorf("chrome = %q, want %q", c.ChromePath, chrome)
	}
	if !slices.Contains(c.Tools, api.ToolExec) || slices.Contains(c.Tools, api.ToolNetworkAccessRequest) || len(c.Tools) != len(api.RemoteToolNames()) {
		t.Errorf("tools = %v", c.Tools)
	}
	if c.RemoteVersion == "" {
		t.Error("remote version is empty")
	}

	t.Setenv("OUTPOST_CHROME_PATH", filepath.Join(t.TempDir(), "missing"))
	if c := Detect(context.Background()); c.ChromePath != "" {
		t.Errorf("chrome = %q for a missing OUTPOST_CHROME_PATH", c.ChromePath)
	}
}

// TestChromePathNames: the public contract's DEVIN_CHROME_PATH works alone,
// and OUTPOST_CHROME_PATH wins when both are set.
func TestChromePathNames(t *testing.T) {
	dir := t.TempDir()
	outpost, public := filepath.Join(dir, "outpost-chrome"), filepath.Join(dir, "public-chrome")
	for _, p := range []string{outpost, public} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(api.EnvChromePath.Name, "")
	t.Setenv(api.EnvChromePath.Public, public)
	if got := ChromePath(); got != public {
		t.Errorf("with %s only: %q, want %q", api.EnvChromePath.Public, got, public)
	}
	t.Setenv(api.EnvChromePath.Name, outpost)
	if got := ChromePath(); got != outpost {
		t.Errorf("with both: %q, want %q", got, outpost)
	}
}

func TestParseMemTotal(t *testing.T) {
	in := "MemFree:  10 kB\nMemTotal:       16303460 kB\n"
	if got := parseMemTotal(strings.NewReader(in)); got != 16303460*1024 {
		t.Errorf("got %d", got)
	}
	if got := parseMemTotal(strings.NewReader("nothing\n")); got != 0 {
		t.Errorf("got %d", got)
	}
}

func TestRequireGit(t *testing.T) {
	if err := RequireGit(context.Background()); err != nil {
		t.Fatalf("RequireGit: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	err := RequireGit(context.Background())
	if err == nil || !strings.Contains(err.Error(), "install") {
		t.Fatalf("RequireGit without git = %v, want an install hint", err)
	}
	if c := Detect(context.Background()); c.Git != "" || c.FFmpeg != "" || c.PasswordlessSudo {
		t.Errorf("without PATH: git=%q ffmpeg=%q sudo=%v", c.Git, c.FFmpeg, c.PasswordlessSudo)
	}
}
