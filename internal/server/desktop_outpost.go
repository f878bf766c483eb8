package server

import (
	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/store"
)

// checkOutpostDesktop validates an outpost's desktop setting and returns
// the one to store: nil for none, or for {"enabled": false} with no size,
// which says nothing.
func checkOutpostDesktop(d *api.OutpostDesktop) (*api.OutpostDesktop, error) {
	if d == nil {
		return nil, nil
	}
	switch {
	case d.Width == 0 && d.Height == 0:
	case d.Width < api.MinDesktopSize || d.Width > api.MaxDesktopSize || d.Height < api.MinDesktopSize || d.Height > api.MaxDesktopSize:
		return nil, errBadRequest("desktop.width and desktop.height must each be from %d to %d pixels, or both left out for the default 1280×800.",
			api.MinDesktopSize, api.MaxDesktopSize)
	}
	if !d.Enabled && d.Width == 0 {
		return nil, nil
	}
	out := *d
	return &out, nil
}

// outpostDesktopSize is the desktop size an outpost gives its sessions
// that give none; nil for the default.
func outpostDesktopSize(o store.Outpost) *api.DesktopSize {
	if d := o.Desktop; d != nil && d.Width > 0 {
		return &api.DesktopSize{Width: d.Width, Height: d.Height}
	}
	return nil
}

// outpostWantsDesktop reports whether every session of the outpost gets a
// desktop.
func outpostWantsDesktop(o store.Outpost) bool {
	return o.Desktop != nil && o.Desktop.Enabled
}
