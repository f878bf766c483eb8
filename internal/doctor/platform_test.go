package doctor

import (
	"errors"
	"strings"
	"testing"
)

// TestPlatformChecksWindows judges a bare Windows (as Wine is: a stub
// powershell, no ConPTY, a workspace Users can read) and a ready one:
// every check not OK says how to fix it, and only a machine with no
// shell at all fails.
func TestPlatformChecksWindows(t *testing.T) {
	t.Parallel()
	bare := PlatformChecks(Platform{OS: "windows", PowerShellStub: true, Cmd: `C:\windows\system32\cmd.exe`,
		ConPTYErr: errors.New("proc CreatePseudoConsole not found"), WorkspaceReaders: []string{"Users", "Everyone"}})
	for name, want := range map[string]Status{"shell": Warn, "conpty": Warn, "service": OK, "admin": OK, "workspace-acl": Warn} {
		c := byName(t, bare, name)
		if c.Status != want || (want != OK) != (c.Fix != "") {
			t.Errorf("bare %s: %+v, want %s, a fix when not ok", name, c, want)
		}
	}
	if c := byName(t, bare, "shell"); !strings.Contains(c.Detail, "stub") || !strings.Contains(c.Detail, "cmd.exe") {
		t.Errorf("shell: %+v", c)
	}
	if c := byName(t, bare, "workspace-acl"); !strings.Contains(c.Detail, "Users, Everyone") || !strings.Contains(c.Fix, "icacls") {
		t.Errorf("workspace-acl: %+v", c)
	}
	if c := byName(t, bare, "conpty"); !strings.Contains(c.Detail, "CreatePseudoConsole") || !strings.Contains(c.Fix, "1809") {
		t.Errorf("conpty: %+v", c)
	}
	if !Passed(bare) {
		t.Error("a Windows with cmd.exe failed")
	}

	ready := PlatformChecks(Platform{OS: "windows", PowerShell: "5", Cmd: `C:\Windows\System32\cmd.exe`, Service: true, Admin: true})
	for _, c := range ready {
		if c.Status != OK || c.Fix != "" {
			t.Errorf("ready %s: %+v", c.Name, c)
		}
	}
	if c := byName(t, ready, "shell"); c.Detail != "PowerShell 5 runs exec's commands" {
		t.Errorf("shell: %+v", c)
	}
	if c := byName(t, ready, "admin"); !strings.Contains(c.Detail, "administrator rights") {
		t.Errorf("admin: %+v", c)
	}

	none := PlatformChecks(Platform{OS: "windows", WorkspaceACLErr: errors.New("access denied")})
	if c := byName(t, none, "shell"); c.Status != Fail || !c.Required || !strings.Contains(c.Fix, "ComSpec") {
		t.Errorf("no shell: %+v", c)
	}
	if c := byName(t, none, "workspace-acl"); c.Status != Skip || !strings.Contains(c.Detail, "access denied") {
		t.Errorf("unreadable access list: %+v", c)
	}
}

// TestPlatformChecksMacOS judges a Mac without the command line tools, a
// job or a GUI session, and one with all three.
func TestPlatformChecksMacOS(t *testing.T) {
	t.Parallel()
	bare := PlatformChecks(Platform{OS: "darwin", GUISession: "Background"})
	for name, want := range map[string]Status{"xcode-tools": Warn, "launchd": OK, "gui-session": Warn} {
		c := byName(t, bare, name)
		if c.Status != want || (want != OK) != (c.Fix != "") {
			t.Errorf("bare %s: %+v, want %s, a fix when not ok", name, c, want)
		}
	}
	if c := byName(t, bare, "xcode-tools"); !strings.Contains(c.Fix, "xcode-select --install") {
		t.Errorf("xcode-tools: %+v", c)
	}
	if c := byName(t, bare, "gui-session"); !strings.Contains(c.Detail, "Background") || !strings.Contains(c.Fix, "--launch-agent") {
		t.Errorf("gui-session: %+v", c)
	}
	if c := byName(t, bare, "launchd"); !strings.Contains(c.Detail, "no worker launchd job") {
		t.Errorf("launchd: %+v", c)
	}
	ready := PlatformChecks(Platform{OS: "darwin", DeveloperDir: "/Library/Developer/CommandLineTools", GUISession: "Aqua",
		LaunchdJobs: []string{"/Library/LaunchDaemons/sh.outpost.worker.mac.plist"}})
	for _, c := range ready {
		if c.Status != OK || c.Fix != "" {
			t.Errorf("ready %s: %+v", c.Name, c)
		}
	}
	if c := byName(t, ready, "launchd"); !strings.Contains(c.Detail, "sh.outpost.worker.mac.plist") {
		t.Errorf("launchd: %+v", c)
	}
	if c := byName(t, PlatformChecks(Platform{OS: "darwin", DesktopOff: true}), "gui-session"); c.Status != Skip {
		t.Errorf("desktop off: %+v", c)
	}
	if got := PlatformChecks(Platform{OS: "linux"}); len(got) != 0 {
		t.Errorf("linux: %+v", got)
	}
}
