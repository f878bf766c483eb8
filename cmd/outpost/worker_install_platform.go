package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outpost-sh/outpost/internal/lazyregexp"
	"github.com/outpost-sh/outpost/internal/osservice"
)

// targetOS is the system worker install writes a service for.
func (o *WorkerInstallOptions) targetOS() string {
	if o.goos != "" {
		return o.goos
	}
	return runtime.GOOS
}

// addForOSFlag adds the hidden --for-os, which plans (with --dry-run) the
// service of another system: how the tests and the docs show a Windows
// service or a launchd job from Linux.
func addForOSFlag(fl *pflag.FlagSet, o *WorkerInstallOptions) {
	fl.StringVar(&o.goos, "for-os", "", "with --dry-run: plan the service of this system (linux, darwin or windows)")
	_ = fl.MarkHidden("for-os")
}

// checkForOS refuses --for-os without --dry-run and names it must not
// take.
func (o *WorkerInstallOptions) checkForOS() error {
	switch {
	case o.goos == "":
		return nil
	case o.goos != "linux" && o.goos != "darwin" && o.goos != "windows":
		return usageErrorf("--for-os must be linux, darwin or windows, not %q", o.goos)
	case !o.DryRun && o.goos != runtime.GOOS:
		return usageErrorf("--for-os %s plans another system's service: it needs --dry-run", o.goos)
	}
	return nil
}

// resolve checks the install's flags for the service manager of its
// system.
func (o *WorkerInstallOptions) resolve() error {
	switch o.targetOS() {
	case "windows", "darwin":
		return o.resolvePortable()
	}
	if o.LaunchAgent || o.LogFile != "" {
		return usageErrorf("--launch-agent and --log-file are for macOS and Windows; a systemd unit logs to the journal")
	}
	return o.resolveSystemd()
}

// needRoot refuses an install or uninstall that needs more rights than
// this process has, before anything is checked or written.
func needRoot(cmd *cobra.Command, o *WorkerInstallOptions) error {
	goos := o.targetOS()
	if goos == "windows" || goos == "darwin" {
		if o.UserUnit || cmd.Flags().Changed("system") {
			return usageErrorf("--system and --user-unit are systemd's: on %s leave them out", osName(goos))
		}
	}
	switch goos {
	case "windows":
		if !o.DryRun && !osservice.IsAdmin() {
			return usageErrorf("installing a Windows service needs administrator rights: run it from an elevated prompt (Run as administrator), or pass --dry-run to see what it would do")
		}
		return nil
	case "darwin":
		switch {
		case o.LaunchAgent && os.Geteuid() == 0 && !o.DryRun:
			return usageErrorf("a LaunchAgent runs in your own GUI session: run this as that user, without sudo")
		case !o.LaunchAgent && os.Geteuid() != 0 && !o.DryRun:
			return usageErrorf("a LaunchDaemon needs root: run it with sudo, or pass --launch-agent for a job of your own GUI session, or --dry-run to see what it would do")
		}
		return nil
	}
	return needRootSystemd(cmd, o)
}

// osName is how messages name a GOOS.
func osName(goos string) string {
	switch goos {
	case "darwin":
		return "macOS"
	case "windows":
		return "Windows"
	}
	return goos
}

// checkServiceManager refuses a machine whose service manager cannot
// take the service. Only systemd is known to be missing at times (in
// containers); launchd and the Windows service control manager are
// always there.
func (o *WorkerInstallOptions) checkServiceManager(ctx context.Context) error {
	switch o.targetOS() {
	case "windows":
		return nil
	case "darwin":
		if _, err := exec.LookPath("launchctl"); err != nil && !o.DryRun {
			return usageErrorf("launchctl not found: is this macOS? nothing was changed")
		}
		return nil
	}
	return o.checkSystemd(ctx)
}

func (o *WorkerInstallOptions) planInstall() (*installPlan, error) {
	switch o.targetOS() {
	case "windows":
		return planWindowsInstall(o.f, o)
	case "darwin":
		return planLaunchdInstall(o.f, o)
	}
	return planWorkerInstall(o.f, o)
}

func (o *WorkerInstallOptions) planUninstall() (*installPlan, error) {
	switch o.targetOS() {
	case "windows":
		return planWindowsUninstall(o.f, o)
	case "darwin":
		return planLaunchdUninstall(o.f, o)
	}
	return planWorkerUninstall(o.f, o)
}

// winAbsPath is an absolute Windows path: a drive's (C:\...) or a share's
// (\\server\share\...).
var winAbsPath = lazyregexp.New(`^(?:[A-Za-z]:[\\/]|\\\\[^\\/]+[\\/][^\\/]+)`)

// isAbsFor reports whether p is absolute on goos.
func isAbsFor(goos, p string) bool {
	if goos == "windows" {
		return winAbsPath.MatchString(p)
	}
	return strings.HasPrefix(p, "/")
}

// resolvePortable checks the flags of a Windows service or launchd job.
func (o *WorkerInstallOptions) resolvePortable() error {
	goos := o.targetOS()
	if err := o.resolveName(); err != nil {
		return err
	}
	if goos == "windows" && o.User != "" {
		return usageErrorf("--user: the Windows service runs as LocalSystem; change its account afterwards with services.msc or 'sc.exe config' if you must")
	}
	if goos == "windows" && o.LaunchAgent {
		return usageErrorf("--launch-agent is macOS's; a Windows service needs no login")
	}
	for _, p := range []struct{ flag, path string }{{"--token-file", o.TokenFile}, {"--dir", o.Dir}, {"--executable", o.Executable}, {"--log-file", o.LogFile}} {
		if p.path != "" && !isAbsFor(goos, p.path) {
			return usageErrorf("%s must be an absolute path, not %q", p.flag, p.path)
		}
	}
	local := goos == runtime.GOOS
	if o.Executable == "" {
		if !local {
			return usageErrorf("--executable is needed to plan a %s service from %s", osName(goos), osName(runtime.GOOS))
		}
		exe, err := os.Executable()
		if err != nil {
			return usageErrorf("find this executable (set --executable): %v", err)
		}
		if o.Executable, err = filepath.EvalSymlinks(exe); err != nil {
			return usageErrorf("find this executable (set --executable): %v", err)
		}
	}
	if local {
		if fi, err := os.Stat(o.Executable); err != nil || fi.IsDir() {
			return usageErrorf("--executable %s is not a program file", o.Executable)
		}
		if o.TokenFile != "" {
			if _, err := os.Stat(o.TokenFile); err != nil {
				return usageErrorf("--token-file: %v", err)
			}
		}
	}
	if goos == "windows" {
		if why := windowsExecutableProblem(o.Executable, o.f.Getenv); why != "" {
			return usageErrorf("the service cannot run %s: %s; copy it first (mkdir \"C:\\Program Files\\Outpost\"; copy %s \"C:\\Program Files\\Outpost\\outpost.exe\") and pass --executable \"C:\\Program Files\\Outpost\\outpost.exe\"",
				o.Executable, why, o.Executable)
		}
	}
	return nil
}

// windowsExecutableProblem says why a service running as LocalSystem must
// not run exe, or "": a program in a temporary directory goes away, and one
// in a user's profile (Downloads, say) may be replaced by that user, who
// would then run code as LocalSystem.
func windowsExecutableProblem(exe string, getenv func(string) string) string {
	norm := func(p string) string {
		return strings.TrimSuffix(strings.ToLower(strings.ReplaceAll(p, "/", `\`)), `\`) + `\`
	}
	e := norm(exe)
	for _, v := range []string{"TEMP", "TMP"} {
		if d := getenv(v); d != "" && strings.HasPrefix(e, norm(d)) {
			return "it is in the temporary directory " + d
		}
	}
	if strings.HasPrefix(e[min(len(e), 2):], `\users\`) || strings.HasPrefix(e, `\users\`) {
		return "it is in a user's profile, where that user could replace a program the service runs as LocalSystem"
	}
	return ""
}
