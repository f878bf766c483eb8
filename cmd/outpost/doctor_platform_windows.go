package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/outpost-sh/outpost/internal/doctor"
	"github.com/outpost-sh/outpost/internal/osservice"
	"github.com/outpost-sh/outpost/internal/remote"
)

// detectPlatform finds out Windows' own prerequisites for a worker with
// workspace dir.
func detectPlatform(ctx context.Context, dir string) doctor.Platform {
	p := doctor.Platform{OS: "windows", Service: osservice.IsWindowsService(), Admin: windows.GetCurrentProcessToken().IsElevated()}
	p.PowerShell, p.PowerShellStub = remote.PowerShellVersion(ctx)
	p.Cmd = os.Getenv("ComSpec")
	if p.Cmd == "" {
		p.Cmd = filepath.Join(os.Getenv("SystemRoot"), "System32", "cmd.exe")
	}
	if _, err := os.Stat(p.Cmd); err != nil {
		if p.Cmd, err = exec.LookPath("cmd"); err != nil {
			p.Cmd = ""
		}
	}
	p.ConPTYErr = remote.ConPTYAvailable()
	p.WorkspaceReaders, p.WorkspaceACLErr = broadReaders(dir)
	return p
}

// broadReaders returns the groups of all users (Users, Authenticated
// Users, Everyone) that dir's access list allows to read it.
func broadReaders(dir string) ([]string, error) {
	sd, err := windows.GetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return nil, err
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return nil, err
	}
	if dacl == nil {
		return []string{"Everyone (no access list at all)"}, nil
	}
	groups := []struct {
		name string
		sid  windows.WELL_KNOWN_SID_TYPE
	}{
		{"Users", windows.WinBuiltinUsersSid},
		{"Authenticated Users", windows.WinAuthenticatedUserSid},
		{"Everyone", windows.WinWorldSid},
	}
	const read = windows.FILE_READ_DATA | windows.GENERIC_READ | windows.GENERIC_ALL
	var found []string
	for _, g := range groups {
		sid, err := windows.CreateWellKnownSid(g.sid)
		if err != nil {
			return nil, err
		}
		for i := range uint32(dacl.AceCount) {
			var ace *windows.ACCESS_ALLOWED_ACE
			if err := windows.GetAce(dacl, i, &ace); err != nil {
				return nil, err
			}
			if ace.Header.AceType != windows.ACCESS_ALLOWED_ACE_TYPE || ace.Mask&read == 0 {
				continue
			}
			if (*windows.SID)(unsafe.Pointer(&ace.SidStart)).Equals(sid) {
				found = append(found, g.name)
				break
			}
		}
	}
	return found, nil
}
