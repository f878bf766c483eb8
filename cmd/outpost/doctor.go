package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/desktop"
	"github.com/outpost-sh/outpost/internal/doctor"
	"github.com/outpost-sh/outpost/internal/machine"
	"github.com/outpost-sh/outpost/internal/netguard"
	"github.com/outpost-sh/outpost/internal/worker"
)

// DoctorOptions are the settings of `outpost doctor`.
type DoctorOptions struct {
	f *Factory
	// Dir is the worker's workspace: its disk is measured and the sandbox
	// probe binds it.
	Dir string
	// DataDir is the worker's data dir, which the sandbox hides.
	DataDir string
	// Outpost, when set, is the outpost this machine is to serve.
	Outpost string
	// Now is this machine's clock; nil means time.Now. Tests move it.
	Now func() time.Time
}

// doctorReport is what `outpost doctor -o json` prints.
type doctorReport struct {
	// OK is whether every required check passed: the exit status is 0.
	OK      bool              `json:"ok"`
	Checks  []doctor.Check    `json:"checks"`
	Server  doctor.ServerInfo `json:"server"`
	Machine doctorMachine     `json:"machine"`
}

type doctorMachine struct {
	api.Capabilities
	machine.Extras
	Workspace string `json:"workspace"`
}

// NewCmdDoctor returns `outpost doctor`. runF replaces the run in tests.
func NewCmdDoctor(f *Factory, runF func(context.Context, *DoctorOptions) error) *cobra.Command {
	opts := &DoctorOptions{f: f}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can serve sessions, and that the server and token work",
		Long: `Check a worker machine, one line per check with the fix when it fails:
git (required), Chrome or Chromium, ffmpeg, the desktop (a small Xvfb
display started, driven and stopped), passwordless sudo, bubblewrap (the
test sandbox a worker makes at start for --isolation auto), Podman or
Docker, the workspace (--dir: it exists, free disk; required); and the server
(--server, --token and --ca-file, or their environment variables, or the
saved login, as 'worker start' reads them): that it answers, that its TLS
certificate verifies with the system's roots and --ca-file and for how long,
that the token is valid, with its scopes, outpost and expiry (a worker needs
outposts.machine), that this clock agrees with the server's, and with
--outpost that the outpost exists, the token may serve it and its platform is
this machine's. On Windows also: PowerShell or cmd.exe (one is required),
the pseudo console persistent shells need, whether it runs as a service or
elevated, and whether all users may read the workspace; on macOS the
command line tools, installed launchd jobs and whether this is a GUI
session.

The exit status is 0 when every required check passed, 1 otherwise; missing
optional tools are warnings. With -o json, the checks and what was found.`,
		Example: `  outpost doctor
  OUTPOST_TOKEN=$(cat ~/box-1.token) outpost doctor --dir ~/box-1 --outpost dev-boxes
  outpost doctor --server https://outpost.example.com --ca-file ca.pem -o json`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			env := envFallback{fl: cmd.Flags(), getenv: f.Getenv}
			env.string("token", api.EnvToken, &f.Token)
			env.string("server", api.EnvServer, &f.Server)
			env.string("data-dir", api.EnvWorkerDataDir, &opts.DataDir)
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runDoctor(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Dir, "dir", "", "the worker's workspace (default: the current directory)")
	fl.StringVar(&opts.DataDir, "data-dir", "", "the worker's data directory (env "+api.EnvWorkerDataDir.Name+"; default ~/.outpost/worker)")
	fl.StringVar(&opts.Outpost, "outpost", "", "also check that the token may serve this outpost from this machine")
	return cmd
}

func runDoctor(ctx context.Context, o *DoctorOptions) error {
	f := o.f
	server, token, err := f.Endpoint()
	if err != nil {
		return err
	}
	caFile, err := f.TrustedCAFile()
	if err != nil {
		return err
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = f.Getwd(); err != nil {
			return fmt.Errorf("find the current directory (set --dir): %w", err)
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	dataDir := o.DataDir
	if dataDir == "" {
		home, err := f.UserHomeDir()
		if err != nil {
			return fmt.Errorf("find the home directory for the worker data dir (set --data-dir): %w", err)
		}
		dataDir = filepath.Join(home, ".outpost", "worker")
	}

	// The machine's probes and the server's checks run at once.
	m := doctor.Machine{Dir: dir}
	var platform doctor.Platform
	var serverChecks []doctor.Check
	var info doctor.ServerInfo
	var wg sync.WaitGroup
	wg.Go(func() { m.Caps = machine.Detect(ctx) })
	wg.Go(func() { m.Extras = machine.DetectExtras(ctx) })
	wg.Go(func() { m.Network.Err = netguard.Check(ctx) })
	wg.Go(func() { platform = detectPlatform(ctx, dir) })
	wg.Go(func() {
		if desktop.XvfbPath() == "" {
			return
		}
		m.Desktop.Probed = true
		m.Desktop.WindowManager, m.Desktop.Err = desktop.Probe(ctx)
	})
	wg.Go(func() {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			m.Sandbox = doctor.Sandbox{NotUsed: "not checked: the workspace is missing"}
			return
		}
		m.Sandbox = worker.ProbeSandbox(ctx, dir, dataDir)
	})
	wg.Go(func() {
		serverChecks, info = doctor.CheckServer(ctx, doctor.ServerOptions{
			Server: server, Token: token, CAFile: caFile, Outpost: o.Outpost, Platform: worker.HostPlatform(),
			UserAgent: "outpost-doctor/" + version, Now: o.Now,
		})
	})
	wg.Wait()
	if m.Sandbox.Err == nil && m.Sandbox.NotUsed == "" {
		noSudo := false // a bwrap sandbox gives sessions none
		m.SessionsSudo = &noSudo
	}
	m.Root = os.Geteuid() == 0
	if _, err := exec.LookPath("sudo"); err != nil {
		m.NoSudo = true
	}
	checks := append(doctor.MachineChecks(m), doctor.PlatformChecks(platform)...)
	checks = append(checks, serverChecks...)
	passed := doctor.Passed(checks)

	if f.JSON() {
		err = printJSON(f.IO.Out, doctorReport{OK: passed, Checks: checks, Server: info,
			Machine: doctorMachine{Capabilities: m.Caps, Extras: m.Extras, Workspace: dir}})
	} else {
		fmt.Fprintf(f.IO.Out, "Checking this machine (workspace %s) and the server at %s:\n\n", dir, server)
		err = doctor.Print(f.IO.Out, checks, doctorStyle(f))
	}
	if err != nil {
		return err
	}
	if !passed {
		return codeError{code: exitFailed, error: errors.New(failedText(checks))}
	}
	return nil
}

// doctorStyle marks checks with symbols on a terminal and words elsewhere
// (logs, pipes, files).
func doctorStyle(f *Factory) doctor.Style {
	if out, ok := f.IO.Out.(*os.File); ok {
		if fi, err := out.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return doctor.Symbols
		}
	}
	return doctor.Words
}

func failedText(checks []doctor.Check) string {
	n := 0
	for _, c := range checks {
		if c.Status == doctor.Fail {
			n++
		}
	}
	if n == 1 {
		return "1 required check failed: fix it before starting a worker"
	}
	return fmt.Sprintf("%d required checks failed: fix them before starting a worker", n)
}
