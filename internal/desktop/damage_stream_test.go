//go:build unix

package desktop

import (
	"bytes"
	"image"
	"image/draw"
	"image/png"
	"testing"
	"time"

	"github.com/jezek/xgb/xproto"

	"github.com/outpost-sh/outpost/api"
)

// compose draws a frame's tiles onto img, as a viewer does.
func compose(t testing.TB, img *image.RGBA, f api.DesktopTiles) {
	t.Helper()
	for _, tile := range f.Tiles {
		p, err := png.Decode(bytes.NewReader(tile.PNG))
		if err != nil {
			t.Fatal(err)
		}
		draw.Draw(img, image.Rect(tile.X, tile.Y, tile.X+tile.W, tile.Y+tile.H), p, p.Bounds().Min, draw.Src)
	}
}

// TestStreamerDamagedTiles: with a damage watch, after a series of partial
// changes (windows appearing here and there, one repainted, one closed)
// the picture a viewer composes from the frames equals a full capture of
// the screen, while the captures read only a part of the screen.
func TestStreamerDamagedTiles(t *testing.T) {
	t.Parallel()
	const w, h = 400, 300
	d := startDesktop(t, w, h)
	watch, err := d.WatchDamage()
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	s := NewStreamer(d)
	s.UseDamage(watch)
	viewer := image.NewRGBA(image.Rect(0, 0, w, h))
	f, ok, err := s.Next()
	if err != nil || !ok || !f.Keyframe {
		t.Fatalf("first frame: keyframe %v, ok %v, %v", f.Keyframe, ok, err)
	}
	compose(t, viewer, f)
	keyPixels := s.CapturedPixels

	// settle sends frames until the viewer's picture is the screen's.
	settle := func(what string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			f, ok, err := s.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				if f.Keyframe {
					t.Fatalf("%s: a keyframe in damage mode", what)
				}
				compose(t, viewer, f)
			}
			screen, err := d.Capture(image.Rectangle{})
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(screen.Pix, viewer.Pix) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the viewer's picture differs from the screen", what)
			}
			select {
			case <-watch.Changed():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	var wins []*testWindow
	for i, r := range []image.Rectangle{
		image.Rect(5, 7, 45, 37), image.Rect(100, 60, 190, 75), image.Rect(330, 250, 399, 299), image.Rect(60, 200, 70, 290),
	} {
		wins = append(wins, openWindow(t, d, r.Min.X, r.Min.Y, r.Dx(), r.Dy()))
		settle("window " + string(rune('1'+i)))
	}
	// Repaint one black, as its first click does, and close another.
	xproto.ChangeWindowAttributes(wins[1].conn, wins[1].win, xproto.CwBackPixel, []uint32{xproto.Setup(wins[1].conn).DefaultScreen(wins[1].conn).BlackPixel})
	xproto.ClearArea(wins[1].conn, false, wins[1].win, 0, 0, 0, 0)
	settle("a repainted window")
	wins[2].conn.Close()
	settle("a closed window")

	partial := s.CapturedPixels - keyPixels
	if partial == 0 || s.Captures < 2 {
		t.Fatalf("no partial captures: %d captures, %d pixels", s.Captures, partial)
	}
	if full := (s.Captures - 1) * w * h; 2*partial > full {
		t.Errorf("the partial changes read %d pixels in %d captures, over half of %d for full ones", partial, s.Captures-1, full)
	}
	t.Logf("after the keyframe: %d captures read %d pixels (full ones: %d)", s.Captures-1, partial, (s.Captures-1)*w*h)
}

// TestDamagedAreas: damaged rectangles become whole tiles, clipped to the
// screen, runs of a row merged and equal runs stacked.
func TestDamagedAreas(t *testing.T) {
	t.Parallel()
	const ts = api.DesktopTileSize
	areas, tiles := damagedAreas([]image.Rectangle{
		image.Rect(10, 10, 20, 20),        // tile (0,0)
		image.Rect(ts+1, 5, ts+2, 2*ts-3), // tiles (1,0), (1,1)
		image.Rect(0, ts, 5, ts+5),        // tile (0,1)
		image.Rect(290, 190, 500, 500),    // the last column's two last tiles, clipped
		image.Rect(-50, -50, -1, -1),      // off the screen
		image.Rect(10, 10, 20, 20),        // again
	}, 300, 200)
	want := []image.Rectangle{image.Rect(0, 0, 2*ts, 2*ts), image.Rect(4*ts, 2*ts, 300, 200)}
	if tiles != 6 || len(areas) != len(want) || areas[0] != want[0] || areas[1] != want[1] {
		t.Errorf("areas %v of %d tiles, want %v of 6", areas, tiles, want)
	}
}

// BenchmarkStreamerSmallChange is a live view's frame for a small change
// (a 100×40 window repainted, as a blinking cursor or a clock is): with
// the damage watch, the streamer captures that window's tiles; without,
// the whole 1280×800 screen, and compares every tile.
func BenchmarkStreamerSmallChange(b *testing.B) {
	for _, mode := range []string{"full", "damaged"} {
		b.Run(mode, func(b *testing.B) {
			d := startDesktop(b, 1280, 800)
			tw := openWindow(b, d, 600, 400, 100, 40)
			scr := xproto.Setup(tw.conn).DefaultScreen(tw.conn)
			s := NewStreamer(d)
			var watch *DamageWatch
			if mode == "damaged" {
				var err error
				if watch, err = d.WatchDamage(); err != nil {
					b.Fatal(err)
				}
				defer watch.Close()
				s.UseDamage(watch)
			}
			if _, _, err := s.Next(); err != nil {
				b.Fatal(err)
			}
			colors := []uint32{scr.WhitePixel, scr.BlackPixel} // the window starts white
			i := 0
			tiles := 0
			for b.Loop() {
				i++
				xproto.ChangeWindowAttributes(tw.conn, tw.win, xproto.CwBackPixel, []uint32{colors[i%2]})
				xproto.ClearArea(tw.conn, false, tw.win, 0, 0, 0, 0)
				if _, err := xproto.GetInputFocus(tw.conn).Reply(); err != nil { // drawn
					b.Fatal(err)
				}
				if watch != nil {
					select {
					case <-watch.Changed():
					case <-time.After(5 * time.Second):
						b.Fatal("no damage reported")
					}
				}
				f, ok, err := s.Next()
				if err != nil || !ok {
					b.Fatalf("frame %d: ok %v, %v", i, ok, err)
				}
				tiles += len(f.Tiles)
			}
			b.ReportMetric(float64(s.CapturedPixels)/float64(s.Captures), "px/capture")
			b.ReportMetric(float64(tiles)/float64(i), "tiles/frame")
		})
	}
}
