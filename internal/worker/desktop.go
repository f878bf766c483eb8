package worker

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/desktop"
)

// DesktopMode says whether the worker gives its sessions a desktop
// (--desktop).
type DesktopMode string

// Desktop modes.
const (
	// DesktopAuto gives sessions a virtual desktop when Xvfb is installed.
	DesktopAuto DesktopMode = "auto"
	// DesktopOn gives sessions a desktop: a virtual one, else the
	// worker's own display ($DISPLAY), else the worker does not start.
	DesktopOn DesktopMode = "on"
	// DesktopOff gives sessions none.
	DesktopOff DesktopMode = "off"
)

// ParseDesktop reads a --desktop value; "" is DesktopAuto.
func ParseDesktop(s string) (DesktopMode, error) {
	switch m := DesktopMode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return DesktopAuto, nil
	case DesktopAuto, DesktopOn, DesktopOff:
		return m, nil
	}
	return "", fmt.Errorf("unknown desktop mode %q: use auto, on or off", s)
}

// desktopKind is what the worker's sessions get.
type desktopKind int

const (
	desktopNone    desktopKind = iota
	desktopVirtual             // each session's remote starts its own Xvfb
	desktopScreen              // sessions share the worker's display
)

// resolveDesktop decides what sessions get from mode and this machine:
// Xvfb's presence and the worker's $DISPLAY. shared is set when the
// worker's own environment turns the spawn contract's desktop switch on
// (api.EnvDesktop) with a DISPLAY: an operator who set that up means
// sessions to use that display, as they did before virtual desktops.
func resolveDesktop(mode DesktopMode, xvfb, display string, shared bool) (desktopKind, error) {
	if mode != DesktopOff && shared && display != "" {
		return desktopScreen, nil
	}
	switch mode {
	case DesktopOff:
		return desktopNone, nil
	case DesktopOn:
		switch {
		case xvfb != "":
			return desktopVirtual, nil
		case display != "":
			return desktopScreen, nil
		}
		return desktopNone, fmt.Errorf("--desktop on: %w, and DISPLAY is not set either", desktop.ErrNoXvfb)
	}
	if xvfb != "" {
		return desktopVirtual, nil
	}
	return desktopNone, nil
}

// desktopEnv adjusts a remote's environment for kind: the spawn contract's
// desktop switch on (api.EnvDesktop, under its Outpost name) or removed,
// and for a virtual desktop no display of the worker's, so the remote
// starts its own rather than drive the worker's screen.
func desktopEnv(env []string, kind desktopKind) []string {
	drop := api.EnvDesktop.Names()
	if kind == desktopVirtual {
		drop = append(drop, "DISPLAY", "XAUTHORITY", "WAYLAND_DISPLAY")
	}
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(drop, k)
	})
	if kind != desktopNone {
		out = append(out, api.EnvDesktop.Name+"=true")
	}
	return out
}

// setupDesktop resolves the worker's desktop mode at start.
func (w *worker) setupDesktop() error {
	mode, err := ParseDesktop(string(w.opts.Desktop))
	if err != nil {
		return err
	}
	w.desktop, err = resolveDesktop(mode, desktop.XvfbPath(), os.Getenv("DISPLAY"), api.EnvDesktop.Get(os.Getenv) == "true")
	if err != nil {
		return err
	}
	switch w.desktop {
	case desktopVirtual:
		w.log.Info("sessions get a virtual desktop (Xvfb) on first use", "desktop", mode)
	case desktopScreen:
		w.log.Warn("sessions get this machine's own display: the computer tool drives the screen a person may be using", "display", os.Getenv("DISPLAY"))
	default:
		w.log.Info("sessions get no desktop", "desktop", mode)
	}
	return nil
}
