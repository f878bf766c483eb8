package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/machine"
)

func byName(t *testing.T, checks []Check, name string) Check {
	t.Helper()
	for _, c := range checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %s check", name)
	return Check{}
}

// TestMachineChecks judges bare and well-equipped machines: only git and
// the workspace can fail; what is missing says how to get it.
func TestMachineChecks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bare := MachineChecks(Machine{Dir: filepath.Join(dir, "missing"), Sandbox: Sandbox{Err: errors.New("bwrap not found")},
		Network: Network{Err: errors.New("create network namespace: needs root")}})
	for name, want := range map[string]Status{"git": Fail, "chrome": Warn, "ffmpeg": Warn, "desktop": Warn, "sudo": Warn, "bwrap": Warn, "network": Warn, "containers": Warn, "workspace": Fail} {
		c := byName(t, bare, name)
		if c.Status != want || c.Fix == "" || c.Required != (want == Fail) {
			t.Errorf("bare %s: %+v, want %s with a fix", name, c, want)
		}
	}
	if c := byName(t, bare, "bwrap"); !strings.Contains(c.Fix, "apt-get install bubblewrap") {
		t.Errorf("bwrap missing: %+v", c)
	}
	if Passed(bare) {
		t.Error("a bare machine passed")
	}

	no := false
	full := MachineChecks(Machine{
		Caps:   api.Capabilities{Git: "git version 2.39.5", ChromePath: "/usr/bin/chromium", ChromeVersion: "Chromium 1", FFmpeg: "ffmpeg version 5.1 Copyright (c) the FFmpeg developers", PasswordlessSudo: true},
		Extras: machine.Extras{Xvfb: "/usr/bin/Xvfb", Podman: "podman version 4.3.1"}, Sandbox: Sandbox{Bwrap: "/usr/bin/bwrap"},
		Dir: dir, SessionsSudo: &no,
	})
	for _, c := range full {
		if c.Status != OK || c.Fix != "" {
			t.Errorf("full %s: %+v", c.Name, c)
		}
	}
	if c := byName(t, full, "ffmpeg"); c.Detail != "ffmpeg version 5.1" {
		t.Errorf("ffmpeg: %q", c.Detail)
	}
	if c := byName(t, full, "sudo"); !strings.Contains(c.Detail, "not for sessions") {
		t.Errorf("sudo in a sandbox: %q", c.Detail)
	}
	// Root needs no sudo; a machine without sudo says so, not that the
	// user lacks a NOPASSWD rule.
	for _, c := range []struct {
		m    Machine
		want Status
		says string
	}{
		{Machine{Dir: dir, Root: true, NoSudo: true}, OK, "run as root too and need no sudo"},
		{Machine{Dir: dir, Root: true, SessionsSudo: &no}, OK, "no root powers"},
		{Machine{Dir: dir, NoSudo: true}, Warn, "sudo is not installed"},
		{Machine{Dir: dir}, Warn, "no passwordless sudo for this user"},
	} {
		if got := byName(t, MachineChecks(c.m), "sudo"); got.Status != c.want || !strings.Contains(got.Detail, c.says) {
			t.Errorf("sudo for root %v, no sudo %v: %+v, want %s saying %q", c.m.Root, c.m.NoSudo, got, c.want, c.says)
		}
	}
	if c := byName(t, full, "workspace"); !strings.Contains(c.Detail, "free") {
		t.Errorf("workspace: %q", c.Detail)
	}

	broken := MachineChecks(Machine{Dir: file, Sandbox: Sandbox{Bwrap: "/usr/bin/bwrap", Err: errors.New("no user namespaces")}})
	if c := byName(t, broken, "bwrap"); c.Status != Warn || !strings.Contains(c.Detail, "no user namespaces") || !strings.Contains(c.Fix, "user namespaces") {
		t.Errorf("broken bwrap: %+v", c)
	}
	if c := byName(t, broken, "workspace"); c.Status != Fail || !strings.Contains(c.Detail, "is not a directory") {
		t.Errorf("a file as workspace: %+v", c)
	}
	if c := byName(t, MachineChecks(Machine{Dir: dir, Sandbox: Sandbox{NotUsed: "not used: --isolation none"}}), "bwrap"); c.Status != Skip {
		t.Errorf("bwrap not used: %+v", c)
	}
}

// TestPrint marks checks as words or symbols, puts fixes under what is
// not ok, and summarizes only what passed.
func TestPrint(t *testing.T) {
	t.Parallel()
	checks := []Check{
		{Name: "git", Status: OK, Detail: "git version 2"},
		{Name: "containers", Status: Warn, Detail: "none", Fix: "install podman."},
		{Name: "tls", Status: Skip, Detail: "plain HTTP"},
	}
	var b strings.Builder
	if err := Print(&b, checks, Words); err != nil {
		t.Fatal(err)
	}
	want := "ok    git         git version 2\n" +
		"warn  containers  none\n" +
		"                  fix: install podman.\n" +
		"skip  tls         plain HTTP\n" +
		"\nEvery required check passed; 1 warning.\n"
	if b.String() != want {
		t.Errorf("words:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	checks = append(checks, Check{Name: "token", Status: Fail, Detail: "not valid", Fix: "use another."})
	_ = Print(&b, checks, Symbols)
	for _, w := range []string{"✓  git ", "!  containers ", "-  tls ", "✗  token       not valid\n               fix: use another.\n"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("symbols lack %q:\n%s", w, b.String())
		}
	}
	if strings.Contains(b.String(), "passed") {
		t.Errorf("a failed report says it passed:\n%s", b.String())
	}
	if got := Summary(checks); len(got) != 8 || got[0] != "git" || got[1] != "ok" || got[7] != "fail" {
		t.Errorf("summary: %v", got)
	}
	if got := Failures(checks); len(got) != 1 || got[0] != "token: not valid (use another.)" {
		t.Errorf("failures: %v", got)
	}
}

func TestDesktopCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		xvfb string
		d    Desktop
		want Status
		says string
	}{
		{"", Desktop{}, Warn, "no Xvfb"},
		{"/usr/bin/Xvfb", Desktop{}, OK, "on first use"},
		{"/usr/bin/Xvfb", Desktop{Probed: true, WindowManager: "openbox"}, OK, "window manager: openbox"},
		{"/usr/bin/Xvfb", Desktop{Probed: true}, OK, "window manager: none"},
		{"/usr/bin/Xvfb", Desktop{Probed: true, Err: errors.New("no XTEST")}, Warn, "no XTEST"},
		{"/usr/bin/Xvfb", Desktop{Off: true}, Skip, "--desktop off"},
	} {
		c := desktopCheck(tc.xvfb, tc.d)
		if c.Name != "desktop" || c.Status != tc.want || !strings.Contains(c.Detail, tc.says) || c.Required {
			t.Errorf("desktopCheck(%q, %+v) = %+v, want %s saying %q", tc.xvfb, tc.d, c, tc.want, tc.says)
		}
		if c.Status == Warn && c.Fix == "" {
			t.Errorf("%+v: a warning without a fix", c)
		}
	}
}
