package doctor

import (
	"fmt"
	"strings"
)

// Platform is what was found out about the prerequisites of Windows or
// macOS itself (cmd/outpost's detectPlatform); its OS says which fields
// apply. On Linux it is empty and gives no checks.
type Platform struct {
	// OS is runtime.GOOS: "windows" or "darwin"; anything else gives no
	// checks.
	OS string

	// Windows.
	//
	// PowerShell is the major version a working PowerShell answered;
	// PowerShellStub is set when a powershell on PATH answered nothing
	// (Wine ships such a stub). Cmd is cmd.exe's path, "" if not found.
	PowerShell     string
	PowerShellStub bool
	Cmd            string
	// Service is whether this process runs as a Windows service; Admin
	// whether it runs elevated, as an administrator.
	Service, Admin bool
	// WorkspaceReaders are the groups of everyone, or of all users, that
	// the workspace's access list lets read it (Users, Authenticated
	// Users, Everyone); WorkspaceACLErr is why it could not be read.
	WorkspaceReaders []string
	WorkspaceACLErr  error
	// ConPTYErr is why the pseudo console API is missing; nil when present.
	ConPTYErr error

	// macOS.
	//
	// DeveloperDir is what xcode-select -p printed: the command line tools
	// (or Xcode) that /usr/bin/git needs; "" when none are installed.
	DeveloperDir string
	// LaunchdJobs are the plists of installed worker jobs (outpost worker
	// install): LaunchDaemons and this user's LaunchAgents.
	LaunchdJobs []string
	// GUISession is the launchd session this runs in (launchctl
	// managername): "Aqua" is a logged-in GUI session.
	GUISession string
	// DesktopOff: sessions get no desktop by choice, so no GUI session is
	// needed.
	DesktopOff bool
}

// PlatformChecks judges the platform's own prerequisites: on Windows the
// shell exec runs, the pseudo console persistent shells need, whether it
// runs as a service or an administrator and who can read the workspace;
// on macOS the command line tools git needs, the launchd job and the GUI
// session computer use needs. Only a missing cmd.exe is required.
func PlatformChecks(p Platform) []Check {
	switch p.OS {
	case "windows":
		return []Check{windowsShellCheck(p), conPTYCheck(p.ConPTYErr), windowsServiceCheck(p), windowsAdminCheck(p.Admin), workspaceACLCheck(p)}
	case "darwin":
		return []Check{developerToolsCheck(p.DeveloperDir), launchdCheck(p.LaunchdJobs), guiSessionCheck(p)}
	}
	return nil
}

func windowsShellCheck(p Platform) Check {
	c := Check{Name: "shell", Required: true}
	switch {
	case p.PowerShell != "":
		c.Status, c.Detail = OK, "PowerShell "+p.PowerShell+" runs exec's commands"
		if p.Cmd == "" {
			c.Detail += "; cmd.exe was not found (exec's shell cmd and persistent shells fail)"
		}
	case p.Cmd == "":
		c.Status, c.Detail = Fail, "neither a working PowerShell nor cmd.exe was found: exec cannot run commands"
		c.Fix = `set ComSpec to cmd.exe's path (normally C:\Windows\System32\cmd.exe) or put PowerShell on PATH.`
	case p.PowerShellStub:
		c.Status, c.Detail = Warn, "the powershell on PATH prints no version (a stub, as Wine's): exec runs cmd.exe ("+p.Cmd+")"
		c.Fix = "install Windows PowerShell 5.1 or PowerShell 7 if sessions need PowerShell; cmd.exe serves otherwise."
	default:
		c.Status, c.Detail = Warn, "no PowerShell on PATH: exec runs cmd.exe ("+p.Cmd+")"
		c.Fix = "install Windows PowerShell 5.1 or PowerShell 7 if sessions need PowerShell; cmd.exe serves otherwise."
	}
	return c
}

func conPTYCheck(err error) Check {
	if err != nil {
		return Check{Name: "conpty", Status: Warn, Detail: fmt.Sprintf("no pseudo console (ConPTY): persistent shells (shell_* tools) fail; exec works: %v", err),
			Fix: "run the worker on Windows 10 1809, Windows Server 2019 or later."}
	}
	return Check{Name: "conpty", Status: OK, Detail: "the pseudo console (ConPTY) is there: persistent shells run cmd.exe on it"}
}

func windowsServiceCheck(p Platform) Check {
	if p.Service {
		return Check{Name: "service", Status: OK, Detail: "running as a Windows service"}
	}
	return Check{Name: "service", Status: OK, Detail: "not running as a service: a worker started here stops when you log off (`outpost worker install --outpost NAME`, elevated, installs one)"}
}

func windowsAdminCheck(admin bool) Check {
	if admin {
		return Check{Name: "admin", Status: OK, Detail: "elevated (administrator): sessions of a worker started here run with administrator rights"}
	}
	return Check{Name: "admin", Status: OK, Detail: "not elevated: sessions run as this user; `outpost worker install` needs an elevated prompt"}
}

func workspaceACLCheck(p Platform) Check {
	c := Check{Name: "workspace-acl"}
	switch {
	case p.WorkspaceACLErr != nil:
		c.Status, c.Detail = Skip, fmt.Sprintf("the workspace's access list could not be read: %v", p.WorkspaceACLErr)
	case len(p.WorkspaceReaders) > 0:
		c.Status = Warn
		c.Detail = "the workspace's access list lets " + strings.Join(p.WorkspaceReaders, ", ") + " read it: other accounts on this machine can read sessions' code and files"
		c.Fix = `remove their access: icacls DIR /inheritance:r /grant:r "%USERNAME%:(OI)(CI)F" SYSTEM:(OI)(CI)F Administrators:(OI)(CI)F.`
	default:
		c.Status, c.Detail = OK, "only named accounts can read the workspace (not Users, Authenticated Users or Everyone)"
	}
	return c
}

func developerToolsCheck(dir string) Check {
	if dir == "" {
		return Check{Name: "xcode-tools", Status: Warn, Detail: "no command line tools (xcode-select -p fails): /usr/bin/git and the compilers only ask to install them",
			Fix: "run `xcode-select --install` (or install git with Homebrew)."}
	}
	return Check{Name: "xcode-tools", Status: OK, Detail: "command line tools at " + dir}
}

func launchdCheck(jobs []string) Check {
	if len(jobs) == 0 {
		return Check{Name: "launchd", Status: OK, Detail: "no worker launchd job is installed: a worker started here runs only while its terminal does (`sudo outpost worker install --outpost NAME` installs one)"}
	}
	return Check{Name: "launchd", Status: OK, Detail: "installed: " + strings.Join(jobs, ", ")}
}

func guiSessionCheck(p Platform) Check {
	c := Check{Name: "gui-session"}
	switch {
	case p.DesktopOff:
		c.Status, c.Detail = Skip, "sessions get no desktop (worker --desktop off)"
	case p.GUISession == "Aqua":
		c.Status, c.Detail = OK, "a logged-in GUI session (Aqua): computer use and simulators can run"
	default:
		c.Status = Warn
		c.Detail = "no GUI session here (launchd session " + orNone(p.GUISession) + "): computer use, screen capture and iOS simulators fail"
		c.Fix = "for sessions that need the screen, install the worker as a LaunchAgent (outpost worker install --launch-agent) of a user who stays logged in."
	}
	return c
}
