// Package machine describes the machine a remote or a worker runs on: its
// OS, CPUs, memory and the optional programs (git, Chrome, ffmpeg, sudo) that
// tools may use. A missing optional program is an empty field, not an error.
package machine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// Version is the version of this build of the remote. Release builds set it
// with -ldflags "-X github.com/outpost-sh/outpost/internal/machine.Version=…".
var Version = "dev"

// probeTimeout bounds each external program Detect runs.
const probeTimeout = 3 * time.Second

// Tools lists the tool names a remote of this build supports: all but
// those the control plane answers itself.
func Tools() []string {
	return api.RemoteToolNames()
}

// Detect reports the capabilities of this machine. It never fails: whatever
// cannot be found is left empty.
func Detect(ctx context.Context) api.Capabilities {
	c := api.Capabilities{
		OS:            runtime.GOOS,
		Arch:          runtime.GOARCH,
		CPUs:          runtime.NumCPU(),
		MemoryBytes:   memoryBytes(),
		Tools:         Tools(),
		RemoteVersion: Version,
	}
	c.Hostname, _ = os.Hostname()
	c.ChromePath = chromePath()
	// The probes run at once: a remote starts with them on its dispatch path.
	var wg sync.WaitGroup
	wg.Go(func() { c.Git = firstLine(probe(ctx, "git", "--version")) })
	wg.Go(func() { c.FFmpeg = firstLine(probe(ctx, "ffmpeg", "-version")) })
	wg.Go(func() { c.PasswordlessSudo = passwordlessSudo(ctx) })
	wg.Go(func() { c.GPUs = DetectGPUs(ctx) })
	c.CPUModel, c.OSVersion = cpuModel(), osVersion()
	if c.ChromePath != "" {
		wg.Go(func() { c.ChromeVersion = chromeVersion(ctx, c.ChromePath) })
	}
	wg.Wait()
	return c
}

// chromeVersion asks the browser its version ("Chromium 156.0…"); a
// wrapper script's noise on other lines is ignored.
func chromeVersion(ctx context.Context, path string) string {
	for _, line := range strings.Split(probe(ctx, path, "--version"), "\n") {
		if strings.Contains(line, "Chrom") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// EnvCapabilities carries a worker's detected capabilities (JSON) to the
// remotes it starts, so each remote need not probe the machine again.
const EnvCapabilities = "OUTPOST_CAPABILITIES"

// FromEnv returns the capabilities in OUTPOST_CAPABILITIES, if valid, with
// this binary's tools and version.
func FromEnv(getenv func(string) string) (*api.Capabilities, bool) {
	raw := getenv(EnvCapabilities)
	if raw == "" {
		return nil, false
	}
	var c api.Capabilities
	if err := json.Unmarshal([]byte(raw), &c); err != nil || c.OS == "" {
		return nil, false
	}
	c.Tools, c.RemoteVersion = Tools(), Version
	return &c, true
}

// RequireGit returns an error with an install hint when git cannot be run.
func RequireGit(ctx context.Context) error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("git is required but was not found in PATH: %s", GitHint())
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("git is required but `git --version` failed: %w: %s (%s)", err, bytes.TrimSpace(out), GitHint())
	}
	return nil
}

// GitHint says how to install git on this OS.
func GitHint() string {
	switch runtime.GOOS {
	case "darwin":
		return "install it with `xcode-select --install` or `brew install git`"
	case "windows":
		return "install it from https://git-scm.com/download/win"
	default:
		return "install it with your package manager, e.g. `apt-get install git` or `dnf install git`"
	}
}

// probe runs name with args and returns its standard output, or "" when the
// program is missing or fails.
func probe(ctx context.Context, name string, args ...string) string {
	path, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return string(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}

// memoryBytes reads MemTotal from /proc/meminfo; 0 elsewhere.
func memoryBytes() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	return parseMemTotal(f)
}

func parseMemTotal(r io.Reader) int64 {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// chromeNames are the programs looked up in PATH for Chrome or Chromium.
var chromeNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// chromeMacPaths are the standard macOS application bundle binaries.
var chromeMacPaths = []string{
	"/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
	"/Applications/Chromium.app/Contents/MacOS/Chromium",
}

// ChromePath returns the Chrome or Chromium the browser tools use:
// api.EnvChromePath (OUTPOST_CHROME_PATH or DEVIN_CHROME_PATH) when set,
// if it names an existing file; else the first standard Chrome or Chromium
// found; else "".
func ChromePath() string { return chromePath() }

func chromePath() string {
	if p := api.EnvChromePath.Get(os.Getenv); p != "" {
		if exists(p) {
			return p
		}
		return ""
	}
	for _, n := range chromeNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if runtime.GOOS == "darwin" {
		for _, p := range chromeMacPaths {
			if exists(p) {
				return p
			}
		}
		if home, err := os.UserHomeDir(); err == nil {
			for _, p := range chromeMacPaths {
				if hp := filepath.Join(home, p); exists(hp) {
					return hp
				}
			}
		}
	}
	return ""
}

func exists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// passwordlessSudo reports whether `sudo -n true` succeeds quickly.
func passwordlessSudo(ctx context.Context) bool {
	path, err := exec.LookPath("sudo")
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-n", "true")
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return false
	}
	return err == nil
}
