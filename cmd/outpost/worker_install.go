package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/deploy/systemd"
	"github.com/outpost-sh/outpost/internal/atomicfile"
	"github.com/outpost-sh/outpost/internal/doctor"
	"github.com/outpost-sh/outpost/internal/lazyregexp"
	"github.com/outpost-sh/outpost/internal/sandbox"
	"github.com/outpost-sh/outpost/internal/worker"
)

// WorkerInstallOptions are the settings of `outpost worker install` and
// `outpost worker uninstall`.
type WorkerInstallOptions struct {
	f       *Factory
	Outpost string
	// User runs the worker; "" means outpost, created when missing
	// (system units only).
	User string
	// TokenFile holds the worker's token; "" means the token of --token or
	// OUTPOST_TOKEN, written to the instance's environment file.
	TokenFile string
	// Dir is the workspace; "" means the unit's state directory.
	Dir string
	// UserUnit installs a unit of the invoking user's systemd instead of
	// a system unit.
	UserUnit bool
	DryRun   bool
	// Executable is the outpost binary the unit runs; "" means this one.
	Executable string
	// SkipServerCheck installs without asking the server whether the
	// token serves the outpost (a server not reachable from here yet).
	SkipServerCheck bool

	// LaunchAgent installs a macOS LaunchAgent (the logged-in user's GUI
	// session) instead of a LaunchDaemon.
	LaunchAgent bool
	// LogFile is where the worker logs instead of the Event Log (Windows)
	// or the launchd job's default log file (macOS).
	LogFile string

	// systemd says why this machine's systemd cannot take the unit, or
	// nil; nil means systemdReady. Tests replace it.
	systemd func(ctx context.Context, userUnit bool) error
	// goos is the system the install is for; "" means this one. Tests set
	// it to plan (and dry-run) another system's service here.
	goos string
}

// defaultWorkerUser is the system user workers run as unless --user says.
const defaultWorkerUser = "outpost"

// instanceName is what an outpost name or id must look like to name a
// unit instance and its files.
var instanceName = lazyregexp.New(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// NewCmdWorkerInstall returns `outpost worker install`. runF replaces the
// run in tests.
func NewCmdWorkerInstall(f *Factory, runF func(context.Context, *WorkerInstallOptions) error) *cobra.Command {
	o := &WorkerInstallOptions{f: f}
	cmd := &cobra.Command{
		Use:   "install --outpost NAME [--user USER] [--token-file FILE] [--dir DIR] [--system|--user-unit] [--dry-run]",
		Short: "Run a worker for an outpost as a service (systemd, launchd or a Windows service)",
		Long: `Install a service that runs 'outpost worker start' for an outpost, and start
it: a systemd unit on Linux, a launchd job on macOS, a Windows service on
Windows (the last two are described at the end).

On Linux it installs, enables and starts outpost-worker@NAME, from the template unit
outpost-worker@.service (deploy/systemd), which this writes with this
executable (or --executable) on its ExecStart.

It writes the template unit, the instance's settings
/etc/outpost/worker-NAME.yaml (--server and --ca-file of this command go
there), a drop-in outpost-worker@NAME.service.d/install.conf for what
differs from the template (--user, --dir, --token-file), and, for a token
given with --token or OUTPOST_TOKEN, /etc/outpost/worker-NAME.env (mode 0600,
read by systemd as root). With --token-file the token stays in its file,
which systemd hands to the worker as a credential. The worker runs as
--user, by default the system user outpost (created when missing), in the
workspace /var/lib/outpost/workspace-NAME or --dir. Then it runs systemctl
daemon-reload, enable and restart.

Before writing anything it checks the token with the server the worker
will use (as 'outpost doctor' does; --skip-server-check skips that), that
systemd runs this machine (else it says to run 'outpost worker start' in the
foreground), and that the unit's sandbox shows the worker every path it
reads (executable, CA file, --dir). A step that fails halfway is taken back.

--user-unit installs a unit of your own systemd user instance instead
(~/.config/systemd/user, settings in ~/.config/outpost, no root needed,
without the system unit's hardening) and enables lingering so it runs
without a login. --dry-run prints the files and commands without writing or
running anything. Running it again updates the files and restarts the
worker. See docs/production.md.

On macOS it writes a LaunchDaemon, /Library/LaunchDaemons/sh.outpost.worker.NAME.plist
(started at boot without a login, as --user or the user who ran sudo;
needs root), or with --launch-agent a LaunchAgent in
~/Library/LaunchAgents (started at your login, inside your GUI session:
what computer use and iOS simulators need; no root). Both are kept alive
and log to --log-file (default /var/log/outpost/worker-NAME.log, or
~/Library/Logs/outpost/ for an agent); settings and token go to
/etc/outpost (an agent's to ~/Library/Application Support/outpost). Then
launchctl bootout (a job loaded before), enable and bootstrap.

On Windows, from an elevated prompt, it creates the service
outpost-worker-NAME (automatic delayed start, LocalSystem, restarted 5 s,
30 s and 2 min after failures), writes the settings and a token file
readable by LocalSystem and the administrators only under
%ProgramData%\outpost, and starts it; the worker logs to the Application
event log, or to --log-file. The executable must not be in a user's
profile or a temporary directory.

Everywhere the token is checked with the server first and a step that
fails takes back the steps before it.`,
		Example: `  sudo OUTPOST_TOKEN=... outpost worker install --outpost gpu-h200 --server https://outpost.example.com
  sudo outpost worker install --outpost gpu-h200 --token-file /etc/outpost/gpu-h200.token --dir /srv/outpost/work
  outpost worker install --outpost dev --user-unit --token-file ~/.config/outpost/dev.token
  outpost worker install --outpost gpu-h200 --dry-run
  sudo outpost worker install --outpost mac-minis --user ci            # macOS LaunchDaemon
  outpost worker install --outpost ios-sims --launch-agent --token-file ~/ios.token   # macOS LaunchAgent
  outpost.exe worker install --outpost win --token-file C:\ProgramData\outpost\win.token   # Windows, elevated`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkForOS(); err != nil {
				return err
			}
			if err := o.resolve(); err != nil {
				return err
			}
			if err := needRoot(cmd, o); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return runWorkerInstall(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Outpost, "outpost", "", "outpost name or id the worker serves; also the unit's instance name")
	fl.StringVar(&o.User, "user", "", "Unix user the worker runs as (default "+defaultWorkerUser+", created when missing; root for --isolation user)")
	fl.StringVar(&o.TokenFile, "token-file", "", "file holding the worker's token, handed to it by systemd (default: the token of --token or "+api.EnvToken.Name+", written to the instance's env file)")
	fl.StringVar(&o.Dir, "dir", "", "workspace directory of the worker, created for --user (default the unit's /var/lib/outpost/workspace-NAME)")
	fl.BoolVar(&o.UserUnit, "user-unit", false, "install a unit of your own systemd user instance instead of a system unit")
	fl.Bool("system", false, "install a system unit (the default)")
	fl.BoolVar(&o.DryRun, "dry-run", false, "print the files and commands without writing or running anything")
	fl.StringVar(&o.Executable, "executable", "", "outpost binary the unit runs (default this one)")
	fl.BoolVar(&o.SkipServerCheck, "skip-server-check", false, "install without checking the token against the server (a server not reachable from this machine yet)")
	fl.BoolVar(&o.LaunchAgent, "launch-agent", false, "macOS: install a LaunchAgent of your GUI session instead of a LaunchDaemon")
	fl.StringVar(&o.LogFile, "log-file", "", "macOS and Windows: the worker's log file (default: the launchd job's log file; Windows: the Application event log)")
	addForOSFlag(fl, o)
	return cmd
}

// NewCmdWorkerUninstall returns `outpost worker uninstall`. runF replaces
// the run in tests.
func NewCmdWorkerUninstall(f *Factory, runF func(context.Context, *WorkerInstallOptions) error) *cobra.Command {
	o := &WorkerInstallOptions{f: f}
	cmd := &cobra.Command{
		Use:   "uninstall --outpost NAME [--system|--user-unit] [--dry-run]",
		Short: "Stop and remove the service of an outpost's worker",
		Long: `Stop and disable outpost-worker@NAME and remove what 'outpost worker install'
wrote for it: its drop-in, its settings and its env file. The template unit
(other instances may use it) and the worker's state and workspace under
/var/lib/outpost are kept. A running session gets the worker's grace period
and goes back to the queue.

On macOS it boots the launchd job out (--launch-agent: your LaunchAgent)
and removes its plist, settings and token file; on Windows it stops and
deletes the service outpost-worker-NAME and removes its settings and token
file. Workspaces, data and logs are kept.`,
		Example: `  sudo outpost worker uninstall --outpost gpu-h200
  outpost worker uninstall --outpost dev --user-unit --dry-run`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkForOS(); err != nil {
				return err
			}
			if err := o.resolveName(); err != nil {
				return err
			}
			if err := needRoot(cmd, o); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), o)
			}
			return runWorkerUninstall(cmd.Context(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Outpost, "outpost", "", "outpost whose worker service to remove (the unit's instance name)")
	fl.BoolVar(&o.UserUnit, "user-unit", false, "remove a unit of your own systemd user instance")
	fl.Bool("system", false, "remove a system unit (the default)")
	fl.BoolVar(&o.DryRun, "dry-run", false, "print the files and commands without removing or running anything")
	fl.BoolVar(&o.LaunchAgent, "launch-agent", false, "macOS: remove your LaunchAgent rather than the LaunchDaemon")
	addForOSFlag(fl, o)
	return cmd
}

func runWorkerInstall(ctx context.Context, o *WorkerInstallOptions) error {
	plan, err := o.planInstall()
	if err != nil {
		return err
	}
	if err := o.checkServiceManager(ctx); err != nil {
		return err
	}
	if err := checkInstallToken(ctx, o, plan); err != nil {
		return err
	}
	return runPlan(ctx, o.f.IO.Out, plan, o.DryRun)
}

func runWorkerUninstall(ctx context.Context, o *WorkerInstallOptions) error {
	plan, err := o.planUninstall()
	if err != nil {
		return err
	}
	if err := o.checkServiceManager(ctx); err != nil {
		return err
	}
	return runPlan(ctx, o.f.IO.Out, plan, o.DryRun)
}

// checkSystemd refuses, before anything is written, a machine whose
// systemd cannot take the unit (a container whose PID 1 is not systemd,
// WSL without systemd, a user without a user manager), saying what to do
// instead. A dry run only notes it.
func (o *WorkerInstallOptions) checkSystemd(ctx context.Context) error {
	check := o.systemd
	if check == nil {
		check = systemdReady
	}
	err := check(ctx, o.UserUnit)
	if err == nil {
		return nil
	}
	alt := fmt.Sprintf("run the worker in the foreground instead ('outpost worker start --outpost %s', under your init system, a terminal multiplexer or a container's entrypoint; docs/production.md)", o.Outpost)
	if o.DryRun {
		fmt.Fprintf(o.f.IO.Out, "Note: a real install would stop here: %v; %s.\n\n", err, alt)
		return nil
	}
	return fmt.Errorf("%w; nothing was changed: %s", err, alt)
}

// systemdReady reports why systemd cannot take a unit here: for a system
// unit, systemd must be PID 1 (sd_booted: /run/systemd/system exists);
// for a user unit, the user's manager must answer.
func systemdReady(ctx context.Context, userUnit bool) error {
	return systemdReadyAt(ctx, "/", userUnit)
}

// systemdReadyAt is systemdReady for a machine whose root is root.
func systemdReadyAt(ctx context.Context, root string, userUnit bool) error {
	if fi, err := os.Stat(filepath.Join(root, "run", "systemd", "system")); err != nil || !fi.IsDir() {
		return errors.New("this machine was not booted with systemd (no /run/systemd/system; PID 1 is another init, as in most containers)")
	}
	if !userUnit {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "systemctl", "--user", "show", "--property=Version").CombinedOutput(); err != nil {
		return fmt.Errorf("your systemd user manager does not answer (systemctl --user: %v: %s; log in through a session that starts it, or use a system unit)", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// checkInstallToken asks the server the worker will use whether the
// token may serve the outpost — valid, with outposts.machine, limited to
// no other outpost, for an outpost that exists and runs this machine's
// platform — before anything is written: a wrong token (an empty one, the
// word null from a jq path that does not exist) would otherwise become a
// unit that restarts forever.
func checkInstallToken(ctx context.Context, o *WorkerInstallOptions, plan *installPlan) error {
	if o.SkipServerCheck {
		fmt.Fprintln(o.f.IO.ErrOut, "Not checking the token against the server (--skip-server-check).")
		return nil
	}
	token := plan.token
	if o.TokenFile != "" {
		t, err := o.f.readTokenFile(o.TokenFile, "--token-file")
		if err != nil {
			return usageError{err}
		}
		token = t
	}
	server := o.f.Server
	if server == "" {
		server = api.EnvServer.Get(o.f.Getenv)
	}
	if server == "" {
		server = DefaultServer
	}
	ca, err := o.f.TrustedCAFile()
	if err != nil {
		return err
	}
	checks, _ := doctor.CheckServer(ctx, doctor.ServerOptions{Server: server, Token: token, CAFile: ca, Outpost: o.Outpost,
		Platform: worker.HostPlatform(), UserAgent: "outpost-cli/" + version})
	if doctor.Passed(checks) {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the server at %s does not accept this worker, so nothing was installed:", server)
	for _, c := range checks {
		if c.Status == doctor.Fail {
			fmt.Fprintf(&b, "\n  %s: %s", c.Name, c.Detail)
			if c.Fix != "" {
				fmt.Fprintf(&b, " (%s)", strings.TrimSuffix(c.Fix, "."))
			}
		}
	}
	b.WriteString("\nFix that, or pass --skip-server-check to install without this check.")
	return errors.New(b.String())
}

func (o *WorkerInstallOptions) resolveName() error {
	if o.Outpost == "" {
		return usageErrorf("needs --outpost NAME: the outpost the worker serves")
	}
	if !instanceName.MatchString(o.Outpost) {
		return usageErrorf("--outpost %q cannot name a systemd unit: use letters, digits, '.', '_' and '-'", o.Outpost)
	}
	return nil
}

// needRootSystemd checks the unit kind and refuses to change the system's
// units without root.
func needRootSystemd(cmd *cobra.Command, o *WorkerInstallOptions) error {
	if o.UserUnit && cmd.Flags().Changed("system") {
		return usageErrorf("give --system or --user-unit, not both")
	}
	if !o.UserUnit && !o.DryRun && os.Geteuid() != 0 {
		return usageErrorf("a system unit needs root: run it with sudo, or pass --user-unit for a unit of your own, or --dry-run to see what it would do")
	}
	return nil
}

// resolveSystemd checks the flags of a systemd install.
func (o *WorkerInstallOptions) resolveSystemd() error {
	if err := o.resolveName(); err != nil {
		return err
	}
	if o.UserUnit && o.User != "" {
		return usageErrorf("--user-unit runs the worker as you: leave out --user")
	}
	for _, p := range []struct{ flag, path string }{{"--token-file", o.TokenFile}, {"--dir", o.Dir}, {"--executable", o.Executable}} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			return usageErrorf("%s must be an absolute path, not %q", p.flag, p.path)
		}
	}
	if o.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this executable (set --executable): %w", err)
		}
		if o.Executable, err = filepath.EvalSymlinks(exe); err != nil {
			return fmt.Errorf("find this executable (set --executable): %w", err)
		}
	}
	// The executable is checked as the unit would run it, through its
	// links, and as any user's home is hidden.
	if why := hiddenFromUnit(o.Executable, false); !o.UserUnit && why != "" {
		return usageErrorf("the service cannot run %s: %s; copy it first (install -m 0755 %s /usr/local/bin/outpost) and pass --executable /usr/local/bin/outpost",
			o.Executable, why, o.Executable)
	}
	if o.TokenFile != "" {
		if _, err := os.Stat(o.TokenFile); err != nil {
			return usageErrorf("--token-file: %v", err)
		}
	}
	return nil
}

// installStep is one thing worker install or uninstall does.
type installStep struct {
	// What: exactly one of dir (create), file (write), remove (a file or
	// a directory tree) and cmd (run).
	dir, file, remove string
	cmd               []string

	mode  fs.FileMode
	owner string // user owning dir or file; "" leaves it to the writer
	group string
	data  []byte
	// secret keeps data out of --dry-run's output.
	secret bool

	// mayFail: a command whose failure is no error (stopping a job that
	// is not loaded).
	mayFail bool
	// undo, for a command, is the command that takes it back; undoIf,
	// run before the command, says whether it applies (nil: always).
	undo   []string
	undoIf func(ctx context.Context) bool

	// call is a step done by a function rather than a command (the
	// Windows service control manager); what says what it does, for
	// messages and dry runs, and detail is printed under it by a dry run.
	call   func(ctx context.Context) (*undoStep, error)
	what   string
	detail string
}

// installPlan is what worker install or uninstall does, in order.
type installPlan struct {
	steps []installStep
	// done is printed at the end of a real run.
	done string
	// token is the worker's token when the plan writes it to the env
	// file (never printed).
	token string
}

// installPaths are where the files of a worker instance go.
type installPaths struct {
	unitDir, configDir string
	systemctl          []string
}

func workerPaths(f *Factory, userUnit bool) (installPaths, error) {
	if !userUnit {
		return installPaths{unitDir: "/etc/systemd/system", configDir: systemConfigDir, systemctl: []string{"systemctl"}}, nil
	}
	dir, err := f.UserConfigDir()
	if err != nil {
		return installPaths{}, fmt.Errorf("find your config directory: %w", err)
	}
	return installPaths{unitDir: filepath.Join(dir, "systemd", "user"), configDir: filepath.Join(dir, "outpost"),
		systemctl: []string{"systemctl", "--user"}}, nil
}

// planWorkerInstall works out the files and commands of a worker install.
func planWorkerInstall(f *Factory, o *WorkerInstallOptions) (*installPlan, error) {
	paths, err := workerPaths(f, o.UserUnit)
	if err != nil {
		return nil, err
	}
	unit := "outpost-worker@" + o.Outpost + ".service"
	p := &installPlan{}
	owner, group := "", ""
	var home string
	if !o.UserUnit {
		owner = o.User
		if owner == "" {
			owner = defaultWorkerUser
		}
		u, err := user.Lookup(owner)
		switch {
		case err == nil:
			home = u.HomeDir
			if g, err := user.LookupGroupId(u.Gid); err == nil {
				group = g.Name
			} else {
				group = u.Gid
			}
		case o.User == "":
			group = owner
			p.steps = append(p.steps, installStep{cmd: []string{"useradd", "--system", "--user-group", "--home-dir", "/var/lib/outpost",
				"--no-create-home", "--shell", "/usr/sbin/nologin", defaultWorkerUser}})
		default:
			return nil, usageErrorf("--user %s: no such user; create it (useradd --system --user-group %s) or leave out --user for %s", owner, owner, defaultWorkerUser)
		}
		p.steps = append(p.steps, installStep{dir: paths.configDir, mode: 0o755})
	} else {
		p.steps = append(p.steps, installStep{dir: paths.configDir, mode: 0o700}, installStep{dir: paths.unitDir, mode: 0o755})
	}

	tmpl, err := workerUnitFile(o.Executable, o.UserUnit)
	if err != nil {
		return nil, err
	}
	p.steps = append(p.steps, installStep{file: filepath.Join(paths.unitDir, systemd.WorkerUnit), mode: 0o644, data: tmpl})

	// The drop-in: what differs from the template.
	var dropIn bytes.Buffer
	fmt.Fprintf(&dropIn, "# Written by `outpost worker install`; `outpost worker uninstall --outpost %s` removes it.\n[Service]\n", o.Outpost)
	if !o.UserUnit && owner != defaultWorkerUser {
		fmt.Fprintf(&dropIn, "User=%s\nGroup=%s\n", owner, group)
		if home != "" && sandbox.Under(home, "/home", "/root", "/run/user") {
			fmt.Fprintf(&dropIn, "# %s's home is %s: ProtectHome=yes would hide it from the worker and its sessions.\nProtectHome=no\n", owner, home)
		}
	}
	// Every path the service reads must be visible through its sandbox:
	// a CA file or workspace under /tmp or a home ends in a restart loop.
	homeVisible := !o.UserUnit && owner != defaultWorkerUser && home != "" && sandbox.Under(home, "/home", "/root", "/run/user")
	if !o.UserUnit {
		if o.Dir != "" {
			if why := hiddenFromUnit(o.Dir, homeVisible); why != "" {
				return nil, usageErrorf("the service cannot use --dir %s: %s; choose a directory outside them, such as /srv/outpost/%s", o.Dir, why, o.Outpost)
			}
			// The install gives --dir to the worker's user as root: through
			// a link it would give away wherever the link leads (a link
			// that whoever may write beside it could plant, to /etc).
			if clean, real := filepath.Clean(o.Dir), resolveExisting(filepath.Clean(o.Dir)); real != clean {
				return nil, usageErrorf("--dir %s leads through a link to %s: the install gives the directory to the worker's user, so it takes the real path only; pass --dir %s", o.Dir, real, real)
			}
		}
		if err := checkUnitCAFile(f, owner, homeVisible); err != nil {
			return nil, err
		}
	}
	if o.Dir != "" {
		fmt.Fprintf(&dropIn, "WorkingDirectory=%s\n", o.Dir)
		if !o.UserUnit {
			fmt.Fprintf(&dropIn, "ReadWritePaths=%s\n", o.Dir)
		}
		p.steps = append(p.steps, installStep{dir: o.Dir, mode: 0o700, owner: owner, group: group})
	}
	envPath := filepath.Join(paths.configDir, "worker-"+o.Outpost+".env")
	var token string
	switch {
	case o.TokenFile != "" && o.UserUnit:
		fmt.Fprintf(&dropIn, "Environment=%s=%s\n", api.EnvTokenFile.Name, o.TokenFile)
	case o.TokenFile != "":
		// systemd reads the file as root and gives the worker a copy only
		// it can read, outside every sandbox's view (/run/credentials).
		fmt.Fprintf(&dropIn, "LoadCredential=token:%s\nEnvironment=%s=%%d/token\n", o.TokenFile, api.EnvTokenFile.Name)
	default:
		token = f.Token
		if token == "" {
			token = api.EnvToken.Get(f.Getenv)
		}
		if token == "" {
			return nil, usageErrorf("the worker needs its token (outposts.machine scope, e.g. 'outpost tokens create --scope outposts.machine --outpost %s'): pass --token-file FILE, or set %s", o.Outpost, api.EnvToken.Name)
		}
	}
	p.steps = append(p.steps, installStep{file: filepath.Join(paths.unitDir, unit+".d", "install.conf"), mode: 0o644, data: dropIn.Bytes()})
	p.token = token
	if token != "" {
		p.steps = append(p.steps, installStep{file: envPath, mode: 0o600, secret: true,
			data: []byte(fmt.Sprintf("# Written by `outpost worker install`: the environment of %s.\n%s=%s\n", unit, api.EnvToken.Name, token))})
	}

	settings, err := workerSettings(f, o)
	if err != nil {
		return nil, err
	}
	cfgGroup := group
	if o.UserUnit {
		cfgGroup = ""
	}
	p.steps = append(p.steps, installStep{file: filepath.Join(paths.configDir, "worker-"+o.Outpost+".yaml"), mode: 0o640, group: cfgGroup, data: settings})

	sc := paths.systemctl
	p.steps = append(p.steps,
		installStep{cmd: append(sc[:len(sc):len(sc)], "daemon-reload")},
		installStep{cmd: append(sc[:len(sc):len(sc)], "enable", unit)},
		installStep{cmd: append(sc[:len(sc):len(sc)], "restart", unit)},
	)
	journal := "journalctl -u " + unit + " -f"
	if o.UserUnit {
		if u, err := user.Current(); err == nil {
			p.steps = append(p.steps, installStep{cmd: []string{"loginctl", "enable-linger", u.Username}})
		}
		journal = "journalctl --user -u " + unit + " -f"
	}
	p.done = fmt.Sprintf("%s is running. Its status: %s status %s; its log: %s\n", unit, strings.Join(sc, " "), unit, journal)
	return p, nil
}

// workerSettings is the instance's YAML settings file.
func workerSettings(f *Factory, o *WorkerInstallOptions) ([]byte, error) {
	var b bytes.Buffer
	switch o.targetOS() {
	case "windows", "darwin":
		fmt.Fprintf(&b, `# Settings of the worker of %s, written by 'outpost worker install'. Each
# key is a flag of 'outpost worker start', each value what the flag takes
# (a list for a repeatable flag); a flag on the service's command line or
# an OUTPOST_* variable beats a key here. See deploy/systemd/worker.yaml.
`, o.Outpost)
	default:
		fmt.Fprintf(&b, `# Settings of outpost-worker@%s, written by 'outpost worker install'. Each
# key is a flag of 'outpost worker start', each value what the flag takes
# (a list for a repeatable flag); an OUTPOST_* variable of the unit or of
# worker-%s.env beats a key here. See deploy/systemd/worker.yaml.
`, o.Outpost, o.Outpost)
	}
	server := f.Server
	if server == "" {
		server = api.EnvServer.Get(f.Getenv)
	}
	if server != "" {
		fmt.Fprintf(&b, "server: %s\n", yamlString(server))
	} else {
		fmt.Fprintf(&b, "# server: %s\n", DefaultServer)
	}
	ca, err := f.TrustedCAFile()
	if err != nil {
		return nil, err
	}
	if ca != "" {
		fmt.Fprintf(&b, "ca-file: %s\n", yamlString(ca))
	}
	b.WriteString("# isolation: auto\n# log-format: json\n")
	return b.Bytes(), nil
}

// hiddenFromUnit says why the system unit's sandbox hides path (as given
// or with its symlinks resolved) from the worker, or "" when it does not:
// PrivateTmp gives the service its own /tmp and /var/tmp, and ProtectHome
// hides /home, /root and /run/user unless the drop-in turns it off
// (homeVisible, for a --user whose home is there).
func hiddenFromUnit(path string, homeVisible bool) string {
	paths := []string{filepath.Clean(path)}
	if real := resolveExisting(paths[0]); real != paths[0] {
		paths = append(paths, real)
	}
	for _, p := range paths {
		if sandbox.Under(p, "/tmp", "/var/tmp") {
			return "the unit's PrivateTmp gives the service its own /tmp and /var/tmp"
		}
		if !homeVisible && sandbox.Under(p, "/home", "/root", "/run/user") {
			return "the unit's ProtectHome hides /home, /root and /run/user"
		}
	}
	return ""
}

// resolveExisting resolves the links of the longest part of the clean,
// absolute path p that exists, and appends the rest: a --dir that the
// install will create under a link is where the link leads.
func resolveExisting(p string) string {
	rest := ""
	for d := p; ; d = filepath.Dir(d) {
		if real, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(real, rest)
		}
		if d == filepath.Dir(d) {
			return p
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// checkUnitCAFile checks that the worker, run by the system unit as owner,
// can read the CA file that goes into its settings.
func checkUnitCAFile(f *Factory, owner string, homeVisible bool) error {
	ca, err := f.TrustedCAFile()
	if err != nil || ca == "" {
		return err
	}
	copyHint := fmt.Sprintf("copy it (install -m 0644 %s /etc/outpost/ca.pem) and pass --ca-file /etc/outpost/ca.pem", ca)
	if why := hiddenFromUnit(ca, homeVisible); why != "" {
		return usageErrorf("the service cannot read the CA file %s: %s; %s", ca, why, copyHint)
	}
	real, err := filepath.EvalSymlinks(ca)
	if err != nil {
		return usageErrorf("the CA file %s cannot be read: %v", ca, err)
	}
	// The worker reads the file through every directory above it. A user
	// the install creates owns no file and is in no file's group: it gets
	// what others get.
	u, err := user.Lookup(owner)
	if err != nil {
		u = nil
	}
	for _, p := range append(parentDirs(real), real) {
		fi, err := os.Stat(p)
		if err != nil {
			return usageErrorf("the CA file %s cannot be read: %v", ca, err)
		}
		if p != real {
			if !mayAccess(u, fi, 0o1) {
				return usageErrorf("the worker's user %s cannot reach the CA file %s: the directory %s (mode %04o) does not let it through; make it searchable (chmod o+x %s), or %s", owner, ca, p, fi.Mode().Perm(), p, copyHint)
			}
			continue
		}
		if !mayAccess(u, fi, 0o4) {
			return usageErrorf("the worker's user %s cannot read the CA file %s (mode %04o): make it readable (chmod 0644 %s), or %s", owner, ca, fi.Mode().Perm(), ca, copyHint)
		}
	}
	return nil
}

// parentDirs lists the directories above the absolute path p, from the
// root down.
func parentDirs(p string) []string {
	var dirs []string
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
		if d == filepath.Dir(d) {
			return dirs
		}
	}
}

// mayAccess reports whether user u (nil: a user not made yet) has the
// permission bit (0o4 read, 0o1 search) on the file of fi, as Unix
// decides it: root always, then the owner's bits for its owner, the
// group's for a member of its group, else the others'.
func mayAccess(u *user.User, fi fs.FileInfo, bit fs.FileMode) bool {
	perm := fi.Mode().Perm()
	uid, gid, ok := fileOwner(fi)
	if !ok {
		return true // no Unix owners here: nothing to check
	}
	if u == nil {
		return perm&bit != 0
	}
	if u.Uid == "0" {
		return true
	}
	if u.Uid == strconv.FormatUint(uint64(uid), 10) {
		return perm&(bit<<6) != 0
	}
	groups, err := u.GroupIds()
	if err != nil {
		groups = []string{u.Gid}
	}
	if slices.Contains(groups, strconv.FormatUint(uint64(gid), 10)) {
		return perm&(bit<<3) != 0
	}
	return perm&bit != 0
}

// yamlString quotes s for a YAML value.
func yamlString(s string) string { return strconv.Quote(s) }

// workerUnitFile is the shipped template unit running exe; for a user
// unit without the system unit's user, group and hardening.
func workerUnitFile(exe string, userUnit bool) ([]byte, error) {
	b, err := systemd.Files.ReadFile(systemd.WorkerUnit)
	if err != nil {
		return nil, err
	}
	s := strings.ReplaceAll(string(b), "ExecStart="+systemd.Binary+" ", "ExecStart="+exe+" ")
	if !userUnit {
		return []byte(s), nil
	}
	var out []string
	skip := false
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "# Hardening"):
			skip = true
		case strings.HasPrefix(line, "["):
			skip = false
		}
		if skip || strings.HasPrefix(line, "User=") || strings.HasPrefix(line, "Group=") {
			continue
		}
		out = append(out, strings.Replace(line, "WantedBy=multi-user.target", "WantedBy=default.target", 1))
	}
	return []byte(strings.Join(out, "\n")), nil
}

// planWorkerUninstall works out what worker uninstall removes and runs.
func planWorkerUninstall(f *Factory, o *WorkerInstallOptions) (*installPlan, error) {
	paths, err := workerPaths(f, o.UserUnit)
	if err != nil {
		return nil, err
	}
	unit := "outpost-worker@" + o.Outpost + ".service"
	sc := paths.systemctl
	p := &installPlan{done: fmt.Sprintf("%s is stopped and removed; its state and workspace are kept.\n", unit)}
	p.steps = append(p.steps,
		installStep{cmd: append(sc[:len(sc):len(sc)], "disable", "--now", unit)},
		installStep{remove: filepath.Join(paths.unitDir, unit+".d")},
		installStep{remove: filepath.Join(paths.configDir, "worker-"+o.Outpost+".yaml")},
		installStep{remove: filepath.Join(paths.configDir, "worker-"+o.Outpost+".env")},
		installStep{cmd: append(sc[:len(sc):len(sc)], "daemon-reload")},
	)
	return p, nil
}

// runPlan prints plan (dryRun) or carries it out, saying what it did.
// When a step fails, the steps done are taken back, newest first, so that
// a failed install leaves the machine as it found it.
func runPlan(ctx context.Context, out io.Writer, p *installPlan, dryRun bool) error {
	if dryRun {
		p.print(out)
		return nil
	}
	var undos []undoStep
	for _, s := range p.steps {
		u, err := s.do(ctx, out)
		if u != nil {
			undos = append(undos, *u)
		}
		if err != nil {
			if rerr := rollBack(ctx, out, undos); rerr != nil {
				return fmt.Errorf("%w; taking back what was done failed too: %v", err, rerr)
			}
			if len(undos) > 0 {
				return fmt.Errorf("%w; what was done before it was taken back", err)
			}
			return err
		}
	}
	fmt.Fprint(out, p.done)
	return nil
}

// undoStep takes back one step done.
type undoStep struct {
	what string
	do   func(ctx context.Context) error
	// reload: systemd must reload its units once everything is back.
	reload []string
	// afterReload: do runs after that reload, not in turn (a restart of
	// a worker that ran before, which must read its restored files).
	afterReload bool
}

// rollBack takes back undos, newest first, then has systemd reload its
// units if a step had touched them.
func rollBack(ctx context.Context, out io.Writer, undos []undoStep) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	var reload []string
	var later []undoStep
	undo := func(u undoStep) {
		if err := u.do(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u.what, err))
			return
		}
		fmt.Fprintf(out, "Took back: %s\n", u.what)
	}
	for i := len(undos) - 1; i >= 0; i-- {
		u := undos[i]
		if u.reload != nil {
			reload = u.reload
		}
		switch {
		case u.do == nil:
		case u.afterReload:
			later = append(later, u)
		default:
			undo(u)
		}
	}
	if reload != nil {
		if msg, err := exec.CommandContext(ctx, reload[0], reload[1:]...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %s", strings.Join(reload, " "), err, strings.TrimSpace(string(msg))))
		}
	}
	for _, u := range later {
		undo(u)
	}
	return errors.Join(errs...)
}

// print writes what the plan would do.
func (p *installPlan) print(w io.Writer) {
	fmt.Fprintln(w, "Dry run: nothing is written or run.")
	for _, s := range p.steps {
		switch {
		case s.dir != "":
			fmt.Fprintf(w, "\nWould create directory %s%s\n", s.dir, s.describe())
		case s.file != "":
			fmt.Fprintf(w, "\nWould write %s%s:\n", s.file, s.describe())
			data := string(s.data)
			if s.secret {
				data = "(holds the token; not shown)\n"
			}
			for _, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
				fmt.Fprintf(w, "    %s\n", line)
			}
		case s.remove != "":
			fmt.Fprintf(w, "\nWould remove %s\n", s.remove)
		case s.call != nil:
			fmt.Fprintf(w, "\nWould %s\n", s.what)
			for _, line := range strings.Split(strings.TrimSuffix(s.detail, "\n"), "\n") {
				if line != "" {
					fmt.Fprintf(w, "    %s\n", line)
				}
			}
		default:
			fmt.Fprintf(w, "\nWould run: %s\n", strings.Join(s.cmd, " "))
		}
	}
}

// describe is the mode and owner of a dir or file step, for messages.
func (s installStep) describe() string {
	d := fmt.Sprintf(" (mode %04o", s.mode)
	if s.owner != "" {
		d += ", owner " + s.owner
	}
	if s.group != "" {
		d += ", group " + s.group
	}
	return d + ")"
}

// do carries out one step and returns how to take it back (nil when
// there is nothing to take back).
func (s installStep) do(ctx context.Context, out io.Writer) (*undoStep, error) {
	switch {
	case s.dir != "":
		created := missingDirs(s.dir)
		// A directory that was there keeps its owner after a rollback:
		// left to a user the rollback deletes, it would belong to whoever
		// gets that uid next.
		var prior fs.FileInfo
		if len(created) == 0 && (s.owner != "" || s.group != "") {
			prior, _ = os.Stat(s.dir)
		}
		u := dirUndo(s.dir, created, prior)
		if err := os.MkdirAll(s.dir, s.mode); err != nil {
			// MkdirAll may have made some of created before it failed.
			return u, fmt.Errorf("create %s: %w", s.dir, err)
		}
		if err := s.chown(s.dir); err != nil {
			return u, err
		}
		fmt.Fprintf(out, "Created %s\n", s.dir)
		return u, nil
	case s.file != "":
		u := fileUndo(s.file)
		if err := writeFile(s.file, s.data, s.mode); err != nil {
			// writeFile may have made the file's directories first.
			return u, err
		}
		if err := s.chown(s.file); err != nil {
			return u, err
		}
		fmt.Fprintf(out, "Wrote %s\n", s.file)
		return u, nil
	case s.remove != "":
		if err := os.RemoveAll(s.remove); err != nil {
			return nil, fmt.Errorf("remove %s: %w", s.remove, err)
		}
		fmt.Fprintf(out, "Removed %s\n", s.remove)
		return nil, nil
	case s.call != nil:
		u, err := s.call(ctx)
		if err != nil {
			return u, fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(out, "Did: %s\n", s.what)
		return u, nil
	default:
		// How to take the command back depends on the state it changes
		// (was the unit enabled, running?): ask before running it.
		u := cmdUndo(ctx, s.cmd)
		if s.undo != nil {
			u = nil
			if s.undoIf == nil || s.undoIf(ctx) {
				u = &undoStep{what: "ran " + strings.Join(s.cmd, " "), do: runCmd(s.undo...)}
			}
		}
		c := exec.CommandContext(ctx, s.cmd[0], s.cmd[1:]...)
		var msg bytes.Buffer
		c.Stdout, c.Stderr = &msg, &msg
		if err := c.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) && (s.mayFail || s.cmd[0] == "systemctl" && len(s.cmd) > 1 && s.cmd[1] == "disable") {
				fmt.Fprintf(out, "Ran %s (%s)\n", strings.Join(s.cmd, " "), strings.TrimSpace(msg.String()))
				return nil, nil // not installed: nothing to stop
			}
			err = fmt.Errorf("%s: %w: %s", strings.Join(s.cmd, " "), err, strings.TrimSpace(msg.String()))
			if u != nil && slices.Contains(s.cmd, "restart") {
				// A restart that failed still stopped the old worker (it
				// runs again once its files are back) or left the new one
				// restarting in a loop (it stops).
				return u, err
			}
			return nil, err
		}
		fmt.Fprintf(out, "Ran %s\n", strings.Join(s.cmd, " "))
		return u, nil
	}
}

// dirUndo is how to take back creating dir: remove the directories of
// created (those MkdirAll made, outermost first) that exist, or, for a dir
// that was there (prior), give it back to its owner and group.
func dirUndo(dir string, created []string, prior fs.FileInfo) *undoStep {
	if len(created) > 0 {
		return &undoStep{what: "created " + dir, do: func(context.Context) error {
			for i := len(created) - 1; i >= 0; i-- {
				if _, err := os.Lstat(created[i]); err != nil {
					continue // not made before MkdirAll failed
				}
				if err := os.Remove(created[i]); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	if prior == nil {
		return nil
	}
	uid, gid, ok := fileOwner(prior)
	if !ok {
		return nil
	}
	return &undoStep{what: fmt.Sprintf("gave %s back to %d:%d", dir, uid, gid), do: func(context.Context) error {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if nu, ng, ok := fileOwner(fi); ok && nu == uid && ng == gid {
			return nil
		}
		return os.Chown(dir, int(uid), int(gid))
	}}
}

// missingDirs lists the directories creating dir makes, outermost first.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		out = append([]string{d}, out...)
	}
	return out
}

// fileUndo is how to put path back as it is now: its old contents, mode
// and owner, or no file.
func fileUndo(path string) *undoStep {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		dirs := missingDirs(filepath.Dir(path)) // writeFile makes them
		return &undoStep{what: "wrote " + path, do: func(context.Context) error {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			for i := len(dirs) - 1; i >= 0; i-- {
				if _, err := os.Lstat(dirs[i]); err != nil {
					continue // not made before the write failed
				}
				if err := os.Remove(dirs[i]); err != nil {
					return err
				}
			}
			return nil
		}}
	}
	uid, gid, owned := fileOwner(fi)
	if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		// The write replaces a link, never its target: put the link back.
		target, err := os.Readlink(path)
		if err != nil {
			return nil
		}
		return &undoStep{what: "restored the link " + path, do: func(context.Context) error {
			tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".link")
			if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := os.Symlink(target, tmp); err != nil {
				return err
			}
			if owned {
				if err := os.Lchown(tmp, int(uid), int(gid)); err != nil {
					os.Remove(tmp)
					return err
				}
			}
			return os.Rename(tmp, path)
		}}
	}
	old, rerr := os.ReadFile(path)
	if err != nil || rerr != nil || !fi.Mode().IsRegular() {
		return nil // not a file this install can put back; it replaces it
	}
	return &undoStep{what: "restored " + path, do: func(context.Context) error {
		if err := atomicfile.Write(path, old, fi.Mode().Perm()); err != nil {
			return err
		}
		if owned {
			return os.Chown(path, int(uid), int(gid))
		}
		return nil
	}}
}

// cmdUndo is how to take back a command of the plan, asked before it
// runs: a unit that was enabled already stays enabled, and a worker that
// was running already runs again, with its old files, once systemd has
// reloaded them; only what the install itself turned on is turned off.
func cmdUndo(ctx context.Context, cmd []string) *undoStep {
	run := runCmd
	switch {
	case cmd[0] == "useradd":
		name := cmd[len(cmd)-1]
		return &undoStep{what: "created user " + name, do: run("userdel", name)}
	case filepath.Base(cmd[0]) != "systemctl":
		return nil
	}
	sc := cmd[:1]
	if len(cmd) > 1 && cmd[1] == "--user" {
		sc = cmd[:2]
	}
	verb, args := cmd[len(sc)], cmd[len(sc)+1:]
	with := func(v string) []string { return append(append(slices.Clone(sc), v), args...) }
	// is-enabled and is-active exit 0 exactly when the unit is.
	was := func(v string) bool { return exec.CommandContext(ctx, sc[0], with(v)[1:]...).Run() == nil }
	switch verb {
	case "daemon-reload":
		return &undoStep{reload: slices.Clone(cmd)}
	case "enable":
		if was("is-enabled") {
			return nil
		}
		return &undoStep{what: "enabled " + strings.Join(args, " "), do: run(with("disable")...)}
	case "restart":
		if was("is-active") {
			return &undoStep{what: "restarted " + strings.Join(args, " ") + " with its old files", do: run(with("restart")...), afterReload: true}
		}
		return &undoStep{what: "started " + strings.Join(args, " "), do: run(with("stop")...)}
	}
	return nil
}

// runCmd is a function that runs args, for an undo.
func runCmd(args ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		if msg, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(msg)))
		}
		return nil
	}
}

// chown gives path to the step's owner and group, when it names them.
func (s installStep) chown(path string) error {
	if s.owner == "" && s.group == "" {
		return nil
	}
	uid, gid := -1, -1
	if s.owner != "" {
		u, err := user.Lookup(s.owner)
		if err != nil {
			return fmt.Errorf("give %s to %s: %w", path, s.owner, err)
		}
		uid, _ = strconv.Atoi(u.Uid)
	}
	if s.group != "" {
		g, err := user.LookupGroup(s.group)
		if err != nil {
			return fmt.Errorf("give %s to group %s: %w", path, s.group, err)
		}
		gid, _ = strconv.Atoi(g.Gid)
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("give %s to %s:%s: %w", path, s.owner, s.group, err)
	}
	return nil
}

// writeFile writes data to path with mode, through a temporary file
// renamed over it, creating its directory.
func writeFile(path string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	return atomicfile.Write(path, data, mode)
}
