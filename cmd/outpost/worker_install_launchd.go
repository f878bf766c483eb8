package main

import (
	"context"
	"fmt"
	"io/fs"
	"os/exec"
	"os/user"
	"path"
	"strconv"
	"time"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/osservice"
	"github.com/outpost-sh/outpost/internal/worker"
)

// launchdPaths are where a macOS worker's files go: system-wide for a
// LaunchDaemon, in the user's Library for a LaunchAgent.
type launchdPaths struct {
	plistDir, configDir, workspace, dataDir, logFile string
	domain                                           string
	user                                             *user.User
}

// launchdPATH is the PATH of the job: launchd starts jobs with
// /usr/bin:/bin:/usr/sbin:/sbin only, and git, ffmpeg and Chrome's
// helpers often live in Homebrew's prefixes.
const launchdPATH = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"

func launchdPathsFor(f *Factory, o *WorkerInstallOptions) (launchdPaths, error) {
	var u *user.User
	var err error
	if o.LaunchAgent {
		if u, err = user.Current(); err != nil {
			return launchdPaths{}, fmt.Errorf("find your user: %w", err)
		}
		lib := path.Join(u.HomeDir, "Library")
		cfg := path.Join(lib, "Application Support", "outpost")
		return launchdPaths{plistDir: path.Join(lib, "LaunchAgents"), configDir: cfg,
			workspace: path.Join(cfg, "workspace-"+o.Outpost), dataDir: path.Join(cfg, "worker-"+o.Outpost),
			logFile: path.Join(lib, "Logs", "outpost", "worker-"+o.Outpost+".log"),
			domain:  osservice.LaunchdDomain(true, atoiOr(u.Uid, -1)), user: u}, nil
	}
	name := o.User
	if name == "" {
		name = f.Getenv("SUDO_USER")
	}
	if name == "" || name == "root" {
		return launchdPaths{}, usageErrorf("a LaunchDaemon runs the worker as a user of your choosing, not root: pass --user NAME (sessions run as that user)")
	}
	if u, err = user.Lookup(name); err != nil {
		return launchdPaths{}, usageErrorf("--user %s: no such user; create it in System Settings > Users & Groups or pass another", name)
	}
	return launchdPaths{plistDir: "/Library/LaunchDaemons", configDir: systemConfigDir,
		workspace: "/var/lib/outpost/workspace-" + o.Outpost, dataDir: "/var/lib/outpost/worker-" + o.Outpost,
		logFile: "/var/log/outpost/worker-" + o.Outpost + ".log", domain: osservice.LaunchdDomain(false, 0), user: u}, nil
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// planLaunchdInstall works out a launchd job install: the settings, the
// token file (the job's user's alone), the workspace, the property list,
// then launchctl bootout (a job loaded before), enable and bootstrap.
func planLaunchdInstall(f *Factory, o *WorkerInstallOptions) (*installPlan, error) {
	lp, err := launchdPathsFor(f, o)
	if err != nil {
		return nil, err
	}
	owner := lp.user.Username
	group := ""
	if g, err := user.LookupGroupId(lp.user.Gid); err == nil {
		group = g.Name
	}
	if o.LaunchAgent {
		owner, group = "", "" // the user writes their own files
	}
	label := osservice.LaunchdLabel(o.Outpost)
	ws := o.Dir
	if ws == "" {
		ws = lp.workspace
	}
	logFile := o.LogFile
	if logFile == "" {
		logFile = lp.logFile
	}
	configMode := fs.FileMode(0o755)
	if o.LaunchAgent {
		configMode = 0o700 // the user's own settings and token
	}
	p := &installPlan{}
	p.steps = append(p.steps,
		installStep{dir: lp.configDir, mode: configMode},
		installStep{dir: ws, mode: 0o700, owner: owner, group: group},
		installStep{dir: lp.dataDir, mode: 0o700, owner: owner, group: group},
		// The job's user writes its log there.
		installStep{dir: path.Dir(logFile), mode: 0o755, owner: owner, group: group},
	)
	tokenFile := o.TokenFile
	if tokenFile == "" {
		token := f.Token
		if token == "" {
			token = api.EnvToken.Get(f.Getenv)
		}
		if token == "" {
			return nil, usageErrorf("the worker needs its token (outposts.machine scope, e.g. 'outpost tokens create --scope outposts.machine --outpost %s'): pass --token-file FILE, or set %s", o.Outpost, api.EnvToken.Name)
		}
		p.token = token
		tokenFile = path.Join(lp.configDir, "worker-"+o.Outpost+".token")
		p.steps = append(p.steps, installStep{file: tokenFile, mode: 0o600, owner: owner, group: group, secret: true, data: []byte(token + "\n")})
	}
	settings, err := workerSettings(f, o)
	if err != nil {
		return nil, err
	}
	settingsFile := path.Join(lp.configDir, "worker-"+o.Outpost+".yaml")
	// Settings root keeps and the job's user reads (a daemon's), or the
	// user's own (an agent's).
	settingsOwner := ""
	if !o.LaunchAgent {
		settingsOwner = "root"
	}
	p.steps = append(p.steps, installStep{file: settingsFile, mode: 0o640, owner: settingsOwner, group: group, data: settings})

	job := osservice.LaunchdJob{
		Label: label,
		ProgramArguments: []string{o.Executable, "worker", "start", "--outpost", o.Outpost, "--config", settingsFile,
			"--token-file", tokenFile, "--dir", ws, "--data-dir", lp.dataDir},
		WorkingDirectory: ws,
		Environment:      map[string]string{"PATH": launchdPATH, "HOME": lp.user.HomeDir},
		StdoutPath:       logFile, StderrPath: logFile,
		// launchd's SIGKILL must not cut the worker's grace period short.
		ExitTimeout: int((worker.DefaultGracePeriod + 30*time.Second) / time.Second),
		Agent:       o.LaunchAgent,
	}
	if !o.LaunchAgent {
		job.UserName = lp.user.Username
	}
	plist, err := job.Plist()
	if err != nil {
		return nil, err
	}
	plistFile := path.Join(lp.plistDir, label+".plist")
	pf := installStep{file: plistFile, mode: 0o644, data: plist}
	if !o.LaunchAgent {
		// launchd ignores a daemon's plist that root does not own.
		pf.owner, pf.group = "root", "wheel"
	}
	target := lp.domain + "/" + label
	loaded := func(ctx context.Context) bool {
		return exec.CommandContext(ctx, "launchctl", "print", target).Run() == nil
	}
	p.steps = append(p.steps, pf,
		// A job loaded before stops and is loaded again from the new plist.
		installStep{cmd: []string{"launchctl", "bootout", target}, mayFail: true,
			undo: []string{"launchctl", "bootstrap", lp.domain, plistFile}, undoIf: loaded},
		installStep{cmd: []string{"launchctl", "enable", target}},
		installStep{cmd: []string{"launchctl", "bootstrap", lp.domain, plistFile},
			undo: []string{"launchctl", "bootout", target}},
	)
	p.done = fmt.Sprintf("%s is loaded and running. Its status: launchctl print %s; its log: tail -f %s\n", label, target, logFile)
	return p, nil
}

// planLaunchdUninstall unloads the job and removes its plist, settings and
// the token file the install wrote; the workspace, the worker's data and
// its log are kept.
func planLaunchdUninstall(f *Factory, o *WorkerInstallOptions) (*installPlan, error) {
	var lp launchdPaths
	if o.LaunchAgent {
		var err error
		if lp, err = launchdPathsFor(f, o); err != nil {
			return nil, err
		}
	} else {
		lp = launchdPaths{plistDir: "/Library/LaunchDaemons", configDir: systemConfigDir, domain: osservice.LaunchdDomain(false, 0)}
	}
	label := osservice.LaunchdLabel(o.Outpost)
	target := lp.domain + "/" + label
	p := &installPlan{done: fmt.Sprintf("%s is stopped and removed; its workspace, data and log are kept.\n", label)}
	p.steps = append(p.steps,
		installStep{cmd: []string{"launchctl", "bootout", target}, mayFail: true},
		installStep{remove: path.Join(lp.plistDir, label+".plist")},
		installStep{remove: path.Join(lp.configDir, "worker-"+o.Outpost+".yaml")},
		installStep{remove: path.Join(lp.configDir, "worker-"+o.Outpost+".token")},
	)
	return p, nil
}
