package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

// Free disk in the workspace below which the workspace check warns, and
// below which it fails.
const (
	DiskWarnBytes = 5 << 30
	DiskFailBytes = 1 << 30
)

// Sandbox is what a worker found out about bubblewrap here
// (worker.ProbeBwrap, or the probe at a worker's start).
type Sandbox struct {
	// Bwrap is the bwrap executable; "" when none was found.
	Bwrap string
	// Err is why bwrap cannot make the worker's sandbox here; nil when it
	// can.
	Err error
	// NotUsed, when set, says why the sandbox was not probed: not Linux,
	// the worker's --isolation is user or none, the workspace is missing.
	NotUsed string
}

// Machine is what was detected about this machine.
type Machine struct {
	// Caps are machine.Detect's findings.
	Caps api.Capabilities
	// Extras are machine.DetectExtras's.
	Extras machine.Extras
	// Sandbox is the bubblewrap probe's finding.
	Sandbox Sandbox
	// Dir is the workspace; its disk is checked.
	Dir string
	// SessionsSudo, when set, is whether sessions get the machine's sudo
	// (false in a bwrap sandbox); nil means the worker's own user's.
	SessionsSudo *bool
	// Root is whether the worker runs as root; NoSudo whether sudo is not
	// installed. Both change what the sudo check says.
	Root, NoSudo bool
	// Network is whether sessions' network policies can be enforced here.
	Network Network
	// Desktop is what a desktop probe found; its zero value judges from
	// Extras.Xvfb alone.
	Desktop Desktop
}

// Desktop is what was found out about giving sessions a desktop here
// (desktop.Probe).
type Desktop struct {
	// Probed is set when a desktop was started to check it; Err is then
	// why it did not work, WindowManager the window manager it ran.
	Probed        bool
	Err           error
	WindowManager string
	// Off says sessions get no desktop by choice (worker --desktop off).
	Off bool
}

// Network is what was found out about enforcing network policies here
// (netguard.Check, or the worker's own decision at start).
type Network struct {
	// Err is why this machine (or worker) cannot enforce a session's
	// network policy; nil when it can.
	Err error
	// NotUsed, when set, says why it was not checked.
	NotUsed string
}

// MachineChecks judges what was detected about a machine: git and the
// workspace are required, the rest optional.
func MachineChecks(m Machine) []Check {
	c := m.Caps
	checks := []Check{gitCheck(c.Git)}
	if c.ChromePath != "" {
		detail := c.ChromePath
		if c.ChromeVersion != "" {
			detail = c.ChromeVersion + " (" + c.ChromePath + ")"
		}
		checks = append(checks, Check{Name: "chrome", Status: OK, Detail: detail})
	} else {
		checks = append(checks, Check{Name: "chrome", Status: Warn, Detail: "no Chrome or Chromium found: the browser tools fail",
			Fix: "install Chromium (apt-get install chromium) or set OUTPOST_CHROME_PATH to a Chrome binary."})
	}
	if c.FFmpeg != "" {
		version, _, _ := strings.Cut(c.FFmpeg, " Copyright")
		checks = append(checks, Check{Name: "ffmpeg", Status: OK, Detail: version})
	} else {
		checks = append(checks, Check{Name: "ffmpeg", Status: Warn, Detail: "not found: screen recording (record_start) fails",
			Fix: "install ffmpeg (apt-get install ffmpeg)."})
	}
	checks = append(checks, desktopCheck(m.Extras.Xvfb, m.Desktop))
	checks = append(checks, sudoCheck(c.PasswordlessSudo, m.SessionsSudo, m.Root, m.NoSudo), bwrapCheck(m.Sandbox), networkCheck(m.Network), containersCheck(m.Extras))
	return append(checks, workspaceCheck(m.Dir))
}

func gitCheck(version string) Check {
	if version == "" {
		return Check{Name: "git", Status: Fail, Required: true, Detail: "not found: workers clone every session's repositories with it",
			Fix: machine.GitHint() + "."}
	}
	return Check{Name: "git", Status: OK, Required: true, Detail: version}
}

func sudoCheck(host bool, sessions *bool, root, noSudo bool) Check {
	switch {
	case root && sessions != nil && !*sessions:
		return Check{Name: "sudo", Status: OK, Detail: "the worker runs as root; sessions in the sandbox get no root powers (no capabilities)"}
	case root:
		return Check{Name: "sudo", Status: OK, Detail: "the worker runs as root: sessions outside a sandbox (--isolation none) run as root too and need no sudo"}
	case noSudo:
		return Check{Name: "sudo", Status: Warn, Detail: "sudo is not installed: sessions cannot use it",
			Fix: "if sessions need root, and only on a machine dedicated to them, install sudo, allow this user NOPASSWD in /etc/sudoers.d and run the worker with --isolation none: sandboxes give no sudo."}
	case sessions != nil && host && !*sessions:
		return Check{Name: "sudo", Status: OK, Detail: "passwordless for this user, but not for sessions: the sandbox gives them none"}
	case host:
		return Check{Name: "sudo", Status: OK, Detail: "passwordless: sessions can run commands as root"}
	}
	return Check{Name: "sudo", Status: Warn, Detail: "no passwordless sudo for this user: sessions cannot use sudo",
		Fix: "if sessions need it, and only on a machine dedicated to them, allow it (NOPASSWD in /etc/sudoers.d) and run the worker with --isolation none: sandboxes give no sudo."}
}

func bwrapCheck(s Sandbox) Check {
	c := Check{Name: "bwrap"}
	switch {
	case s.NotUsed != "":
		c.Status, c.Detail = Skip, s.NotUsed
	case s.Err == nil:
		c.Status, c.Detail = OK, s.Bwrap+" makes the worker's sandbox here: sessions cannot read the worker's token (--isolation auto)"
	case s.Bwrap == "":
		c.Status, c.Detail = Warn, "bubblewrap is not installed: sessions would run as the worker's user and could read its token"
		c.Fix = "install it (apt-get install bubblewrap), or run the worker as root with --isolation user --run-as USER."
	default:
		c.Status, c.Detail = Warn, fmt.Sprintf("%s cannot make a sandbox here, so sessions would run as the worker's user and could read its token: %v", s.Bwrap, s.Err)
		c.Fix = "allow unprivileged user namespaces (sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone; on Ubuntu 24.04 an AppArmor profile for bwrap), or run the worker as root with --isolation user --run-as USER."
	}
	return c
}

// networkCheck says whether sessions with a network policy can run here;
// a worker that cannot enforce one leaves them to others, so it warns.
func networkCheck(n Network) Check {
	c := Check{Name: "network"}
	switch {
	case n.NotUsed != "":
		c.Status, c.Detail = Skip, n.NotUsed
	case n.Err == nil:
		c.Status, c.Detail = OK, "enforced: each restricted session runs in a network namespace of its own behind the worker's egress engine (with --isolation bwrap or user; a worker with --isolation none refuses them)"
	default:
		c.Status, c.Detail = Warn, fmt.Sprintf("not enforced here, so sessions with a network policy are left to other workers: %v", n.Err)
		c.Fix = "run the worker as root on Linux, with the ip command (iproute2) and /dev/net/tun, and --isolation bwrap or user."
	}
	return c
}

func containersCheck(e machine.Extras) Check {
	switch {
	case e.Podman != "" && e.Docker != "":
		return Check{Name: "containers", Status: OK, Detail: e.Podman + "; " + e.Docker}
	case e.Podman != "":
		return Check{Name: "containers", Status: OK, Detail: e.Podman}
	case e.Docker != "":
		return Check{Name: "containers", Status: OK, Detail: e.Docker}
	}
	return Check{Name: "containers", Status: Warn, Detail: "neither Podman nor Docker found: sessions cannot run containers",
		Fix: "install Podman (apt-get install podman) or Docker if sessions need containers."}
}

func workspaceCheck(dir string) Check {
	c := Check{Name: "workspace", Required: true}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.Status, c.Detail = Fail, dir+" does not exist"
		c.Fix = "create it (mkdir -p " + dir + ") or point --dir at the worker's workspace."
		return c
	case err != nil:
		c.Status, c.Detail, c.Fix = Fail, err.Error(), "point --dir at a directory this user can use."
		return c
	case !fi.IsDir():
		c.Status, c.Detail, c.Fix = Fail, dir+" is not a directory", "point --dir at the worker's workspace directory."
		return c
	}
	free, err := freeBytes(dir)
	if err != nil {
		c.Status, c.Detail = Skip, fmt.Sprintf("%s: free disk unknown: %v", dir, err)
		return c
	}
	c.Detail = fmt.Sprintf("%s: %s free", dir, api.ByteSize(int64(free)))
	switch {
	case free < DiskFailBytes:
		c.Status, c.Fix = Fail, "free disk space there, or point --dir at a larger disk: sessions clone and build in it."
	case free < DiskWarnBytes:
		c.Status, c.Fix = Warn, "free disk space there, or point --dir at a larger disk: sessions clone and build in it."
	default:
		c.Status = OK
	}
	return c
}

func desktopCheck(xvfb string, d Desktop) Check {
	c := Check{Name: "desktop"}
	switch {
	case d.Off:
		c.Status, c.Detail = Skip, "off (worker --desktop off): sessions get no desktop and no computer tool"
	case xvfb == "":
		c.Status, c.Detail = Warn, "no Xvfb: sessions get no desktop and no computer tool (unless the worker runs with --desktop on and a DISPLAY)"
		c.Fix = "install Xvfb and a light window manager (apt-get install xvfb matchbox-window-manager)."
	case d.Probed && d.Err != nil:
		c.Status, c.Detail = Warn, fmt.Sprintf("Xvfb is installed (%s) but a desktop did not work: %v", xvfb, d.Err)
		c.Fix = "run Xvfb -displayfd 1 by hand to see why it does not start."
	case d.Probed:
		c.Status, c.Detail = OK, "a virtual desktop (Xvfb) starts and the computer tool drives it; window manager: "+orNone(d.WindowManager)
		if d.WindowManager == "" {
			c.Detail += " (windows keep the place their programs ask for; apt-get install matchbox-window-manager for one)"
		}
	default:
		c.Status, c.Detail = OK, "Xvfb ("+xvfb+"): sessions get a virtual desktop on first use"
	}
	return c
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
