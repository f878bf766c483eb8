package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/osservice"
)

// winJoin joins Windows path elements, on any system (filepath.Join uses
// this system's separator, and the plan is tested on Linux).
func winJoin(elem ...string) string {
	for i, e := range elem {
		if i > 0 {
			e = strings.Trim(e, `\`)
		} else {
			e = strings.TrimRight(e, `\`)
		}
		elem[i] = e
	}
	return strings.Join(elem, `\`)
}

// windowsConfigDir is where a Windows worker's settings, token and, by
// default, workspace and data live: %ProgramData%\outpost.
func windowsConfigDir(f *Factory) string {
	pd := f.Getenv("ProgramData")
	if pd == "" {
		pd = `C:\ProgramData`
	}
	return winJoin(pd, "outpost")
}

// planWindowsInstall works out a Windows service install: the settings,
// the token file readable by LocalSystem and the administrators only, the
// service with its recovery actions and Event Log source, and its start.
// Each step done is taken back when a later one fails.
func planWindowsInstall(f *Factory, o *WorkerInstallOptions) (*installPlan, error) {
	dir := windowsConfigDir(f)
	ws := o.Dir
	if ws == "" {
		ws = winJoin(dir, "workspace-"+o.Outpost)
	}
	p := &installPlan{}
	p.steps = append(p.steps, installStep{dir: dir, mode: 0o755}, installStep{dir: ws, mode: 0o700})
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
		tokenFile = winJoin(dir, "worker-"+o.Outpost+".token")
		path := tokenFile
		p.steps = append(p.steps, installStep{
			what: "write the token to " + path + ", readable by LocalSystem and the Administrators group only",
			call: func(context.Context) (*undoStep, error) {
				u := fileUndo(path)
				return u, osservice.WriteSecretFile(path, []byte(token+"\n"))
			},
		})
	}
	settings, err := workerSettings(f, o)
	if err != nil {
		return nil, err
	}
	p.steps = append(p.steps, installStep{file: winJoin(dir, "worker-"+o.Outpost+".yaml"), mode: 0o644, data: settings})

	s := osservice.NewWorkerWindowsService(osservice.WindowsServiceOptions{
		Outpost: o.Outpost, Executable: o.Executable,
		ConfigFile: winJoin(dir, "worker-"+o.Outpost+".yaml"),
		TokenFile:  tokenFile, Dir: ws, LogFile: o.LogFile,
		DataDir: winJoin(dir, "worker-"+o.Outpost),
	})
	p.steps = append(p.steps,
		installStep{
			what: "create (or update) the Windows service " + s.Name, detail: s.Describe(),
			call: func(context.Context) (*undoStep, error) {
				undo, err := osservice.InstallWindowsService(s)
				if err != nil {
					return nil, err
				}
				return &undoStep{what: "created the service " + s.Name, do: func(context.Context) error { return undo() }}, nil
			},
		},
		installStep{
			what: "start the service " + s.Name + " (stopping it first if it runs)",
			call: func(ctx context.Context) (*undoStep, error) {
				undo, err := osservice.RestartWindowsService(ctx, s.Name)
				if undo == nil {
					return nil, err
				}
				// Back to how it was once its old settings are back.
				return &undoStep{what: "put back the run state of " + s.Name, do: func(context.Context) error { return undo() }, afterReload: true}, err
			},
		},
	)
	logs := fmt.Sprintf("Get-WinEvent -ProviderName %s -MaxEvents 20", s.Name)
	if o.LogFile != "" {
		logs = "Get-Content -Wait " + o.LogFile
	}
	p.done = fmt.Sprintf("The service %s is running. Its status: Get-Service %s; its log: %s\n", s.Name, s.Name, logs)
	return p, nil
}

// planWindowsUninstall stops and deletes the service and removes its
// settings and the token file the install wrote; the workspace and the
// worker's data are kept.
func planWindowsUninstall(f *Factory, o *WorkerInstallOptions) (*installPlan, error) {
	dir := windowsConfigDir(f)
	name := osservice.WindowsServiceName(o.Outpost)
	p := &installPlan{done: fmt.Sprintf("The service %s is stopped and removed; its workspace and data under %s are kept.\n", name, dir)}
	p.steps = append(p.steps,
		installStep{
			what: "stop and delete the service " + name + " (a running session gets the worker's grace period) and its Event Log source",
			call: func(ctx context.Context) (*undoStep, error) {
				found, err := osservice.RemoveWindowsService(ctx, name)
				if err == nil && !found {
					fmt.Fprintf(f.IO.Out, "No service %s was installed.\n", name)
				}
				return nil, err
			},
		},
		installStep{remove: winJoin(dir, "worker-"+o.Outpost+".yaml")},
		installStep{remove: winJoin(dir, "worker-"+o.Outpost+".token")},
	)
	return p, nil
}
