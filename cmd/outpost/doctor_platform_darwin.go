package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-sh/outpost/internal/doctor"
)

// detectPlatform finds out macOS's own prerequisites: the command line
// tools, installed worker jobs, the launchd session.
func detectPlatform(ctx context.Context, _ string) doctor.Platform {
	p := doctor.Platform{OS: "darwin"}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "xcode-select", "-p").Output(); err == nil {
		p.DeveloperDir = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "launchctl", "managername").Output(); err == nil {
		p.GUISession = strings.TrimSpace(string(out))
	}
	dirs := []string{"/Library/LaunchDaemons"}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "Library", "LaunchAgents"))
	}
	for _, d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, "sh.outpost.worker.*.plist"))
		p.LaunchdJobs = append(p.LaunchdJobs, m...)
	}
	return p
}
