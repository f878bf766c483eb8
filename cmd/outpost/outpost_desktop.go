package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// desktopFlagHelp is the help of --desktop on outposts create and update.
const desktopFlagHelp = "the outpost's sessions get a desktop: on (1280×800), WIDTHxHEIGHT (on, at that size) or off (the outpost says nothing; its machines decide)"

// parseOutpostDesktop reads --desktop: on, off or WIDTHxHEIGHT.
func parseOutpostDesktop(s string) (*api.OutpostDesktop, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "on":
		return &api.OutpostDesktop{Enabled: true}, nil
	case "off":
		return &api.OutpostDesktop{}, nil
	default:
		w, h, ok := strings.Cut(v, "x")
		width, errW := strconv.Atoi(w)
		height, errH := strconv.Atoi(h)
		if !ok || errW != nil || errH != nil {
			return nil, usageErrorf("--desktop %q: use on, off or WIDTHxHEIGHT (such as 1600x900)", s)
		}
		return &api.OutpostDesktop{Enabled: true, Width: width, Height: height}, nil
	}
}

// desktopText shows an outpost's desktop setting.
func desktopText(d *api.OutpostDesktop) string {
	size := "1280×800"
	if d != nil && d.Width > 0 {
		size = fmt.Sprintf("%d×%d", d.Width, d.Height)
	}
	switch {
	case d == nil:
		return "not set (its machines decide)"
	case d.Enabled:
		return "on, " + size
	}
	return "not required; " + size + " where a machine gives one"
}
