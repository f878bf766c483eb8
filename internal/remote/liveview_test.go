package remote

import (
	"testing"

	"github.com/outpost-sh/outpost/api"
)

// TestSplitFrame: a frame larger than a message's bound goes in several
// messages that hold every tile once, only the first a keyframe.
func TestSplitFrame(t *testing.T) {
	t.Parallel()
	f := api.DesktopTiles{Keyframe: true, Width: 640, Height: 64}
	for i := range 10 {
		f.Tiles = append(f.Tiles, api.DesktopTile{X: 64 * i, W: 64, H: 64, PNG: make([]byte, 1000)})
	}
	msgs := splitFrame(f, 3100) // three tiles a message
	if len(msgs) != 4 {
		t.Fatalf("%d messages, want 4", len(msgs))
	}
	seen := 0
	for i, m := range msgs {
		if len(m) > 3100+8 {
			t.Errorf("message %d has %d bytes", i, len(m))
		}
		p, err := api.ParseDesktopTiles(m)
		if err != nil {
			t.Fatal(err)
		}
		if p.Keyframe != (i == 0) || p.Width != 640 {
			t.Errorf("message %d: keyframe %v, width %d", i, p.Keyframe, p.Width)
		}
		for _, tl := range p.Tiles {
			if tl.X != 64*seen {
				t.Errorf("tile %d at x %d", seen, tl.X)
			}
			seen++
		}
	}
	if seen != 10 {
		t.Errorf("%d tiles, want 10", seen)
	}
	if one := splitFrame(f, 1<<20); len(one) != 1 {
		t.Errorf("a small frame went in %d messages", len(one))
	}
}
