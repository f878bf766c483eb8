package worker

import (
	"errors"
	"slices"
	"testing"

	"github.com/outpost-sh/outpost/internal/desktop"
)

func TestParseDesktop(t *testing.T) {
	for in, want := range map[string]DesktopMode{"": DesktopAuto, "auto": DesktopAuto, "ON": DesktopOn, " off ": DesktopOff} {
		if got, err := ParseDesktop(in); err != nil || got != want {
			t.Errorf("ParseDesktop(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseDesktop("yes"); err == nil {
		t.Error(`ParseDesktop("yes") succeeded`)
	}
}

func TestResolveDesktop(t *testing.T) {
	for _, tc := range []struct {
		mode          DesktopMode
		xvfb, display string
		shared        bool
		want          desktopKind
		fails         bool
	}{
		{DesktopAuto, "/usr/bin/Xvfb", "", false, desktopVirtual, false},
		{DesktopAuto, "/usr/bin/Xvfb", ":0", false, desktopVirtual, false}, // never the worker's screen by default
		{DesktopAuto, "", ":0", false, desktopNone, false},
		{DesktopAuto, "", "", false, desktopNone, false},
		{DesktopOn, "/usr/bin/Xvfb", ":0", false, desktopVirtual, false},
		{DesktopOn, "", ":0", false, desktopScreen, false},
		{DesktopOn, "", "", false, desktopNone, true},
		{DesktopOff, "/usr/bin/Xvfb", ":0", false, desktopNone, false},
		// OUTPOST_DESKTOP=true with a DISPLAY in the worker's environment:
		// that display, as before virtual desktops, unless off.
		{DesktopAuto, "/usr/bin/Xvfb", ":99", true, desktopScreen, false},
		{DesktopOff, "/usr/bin/Xvfb", ":99", true, desktopNone, false},
		{DesktopAuto, "/usr/bin/Xvfb", "", true, desktopVirtual, false},
	} {
		got, err := resolveDesktop(tc.mode, tc.xvfb, tc.display, tc.shared)
		if got != tc.want || (err != nil) != tc.fails {
			t.Errorf("resolveDesktop(%s, %q, %q) = %v, %v", tc.mode, tc.xvfb, tc.display, got, err)
		}
		if err != nil && !errors.Is(err, desktop.ErrNoXvfb) {
			t.Errorf("error %v does not wrap ErrNoXvfb", err)
		}
	}
}

func TestDesktopEnv(t *testing.T) {
	env := []string{"PATH=/usr/bin", "DISPLAY=:0", "XAUTHORITY=/home/u/.Xauthority", "DEVIN_OUTPOST_DESKTOP=true"}
	virtual := desktopEnv(env, desktopVirtual)
	if want := []string{"PATH=/usr/bin", "OUTPOST_DESKTOP=true"}; !slices.Equal(virtual, want) {
		t.Errorf("virtual: %q, want %q", virtual, want)
	}
	screen := desktopEnv(env, desktopScreen)
	if want := []string{"PATH=/usr/bin", "DISPLAY=:0", "XAUTHORITY=/home/u/.Xauthority", "OUTPOST_DESKTOP=true"}; !slices.Equal(screen, want) {
		t.Errorf("screen: %q, want %q", screen, want)
	}
	none := desktopEnv(env, desktopNone)
	if want := []string{"PATH=/usr/bin", "DISPLAY=:0", "XAUTHORITY=/home/u/.Xauthority"}; !slices.Equal(none, want) {
		t.Errorf("none: %q, want %q", none, want)
	}
	if env[3] != "DEVIN_OUTPOST_DESKTOP=true" {
		t.Error("desktopEnv changed its argument")
	}
}
