//go:build unix

package desktop

import (
	"bytes"
	"context"
	"image"
	"image/draw"
	"image/png"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/api"
)

// TestStreamerSendsOnlyChangedTiles: the first frame is every tile, an
// unchanged screen gives no frame, and a window drawn on the screen gives
// exactly the tiles it covers, whose pixels are the screen's.
func TestStreamerSendsOnlyChangedTiles(t *testing.T) {
	t.Parallel()
	d := startDesktop(t, 300, 200)
	s := NewStreamer(d)
	f, ok, err := s.Next()
	if err != nil || !ok || !f.Keyframe || f.Width != 300 || f.Height != 200 || len(f.Tiles) != 5*4 {
		t.Fatalf("first frame: keyframe %v, %d×%d, %d tiles, %v; want a keyframe of 20 tiles", f.Keyframe, f.Width, f.Height, len(f.Tiles), err)
	}
	if f, ok, err := s.Next(); err != nil || ok || len(f.Tiles) != 0 {
		t.Fatalf("an unchanged screen gave %d tiles (%v)", len(f.Tiles), err)
	}
	openWindow(t, d, 70, 70, 40, 40) // tiles (1,1) only: 64..128 both ways
	var got api.DesktopTiles
	ok = false
	deadline := time.Now().Add(5 * time.Second)
	for !ok && time.Now().Before(deadline) {
		got, ok, err = s.Next()
		if err != nil {
			t.Fatal(err)
		}
	}
	if !ok || got.Keyframe || len(got.Tiles) != 1 || got.Tiles[0].X != 64 || got.Tiles[0].Y != 64 {
		t.Fatalf("after drawing a window: %+v tiles, keyframe %v; want the one tile at 64,64", tileRects(got), got.Keyframe)
	}
	tile := got.Tiles[0]
	img, err := png.Decode(bytes.NewReader(tile.PNG))
	if err != nil {
		t.Fatal(err)
	}
	want, err := d.Capture(image.Rect(tile.X, tile.Y, tile.X+tile.W, tile.Y+tile.H))
	if err != nil {
		t.Fatal(err)
	}
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Rect, img, img.Bounds().Min, draw.Src)
	if !bytes.Equal(rgba.Pix, want.Pix) {
		t.Errorf("the tile's pixels differ from a capture of its region")
	}
	if white := meanLevel(want, image.Rect(70-64, 70-64, 110-64, 110-64)); white < 250 {
		t.Errorf("the window's area in the tile has mean level %d, want white", white)
	}
	s.Reset()
	if f, ok, _ := s.Next(); !ok || !f.Keyframe || len(f.Tiles) != 20 {
		t.Errorf("after Reset: keyframe %v with %d tiles, want all 20", f.Keyframe, len(f.Tiles))
	}
}

func tileRects(f api.DesktopTiles) []image.Rectangle {
	var rs []image.Rectangle
	for _, t := range f.Tiles {
		rs = append(rs, image.Rect(t.X, t.Y, t.X+t.W, t.Y+t.H))
	}
	return rs
}

// TestInputReachesWindows: a person's pointer and key events go to the
// display through XTEST; bad events are refused and send nothing.
func TestInputReachesWindows(t *testing.T) {
	t.Parallel()
	d := startDesktop(t, 320, 240)
	tw := openWindow(t, d, 10, 10, 200, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := click(ctx, d, 50, 60); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-tw.clicks:
		if e.EventX != 40 || e.EventY != 50 || e.Detail != 1 {
			t.Errorf("click at %d,%d button %d, want 40,50 button 1", e.EventX, e.EventY, e.Detail)
		}
	case <-ctx.Done():
		t.Fatal("the window got no click")
	}
	for _, in := range []api.DesktopInput{{Kind: api.DesktopText, Text: "hi"}, {Kind: api.DesktopKeyDown, Key: "x"}, {Kind: api.DesktopKeyUp, Key: "x"}} {
		if err := d.Input(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if got := tw.text(t, 3); got != "hix" {
		t.Errorf("typed %q, want %q", got, "hix")
	}
	for _, bad := range []api.DesktopInput{
		{Kind: "wiggle"}, {Kind: api.DesktopPointerMove, X: 320, Y: 0}, {Kind: api.DesktopPointerDown, X: 1, Y: 1, Button: 9},
		{Kind: api.DesktopKeyDown, Key: "NoSuchKey"}, {Kind: api.DesktopText, Text: string(make([]byte, 5000))},
	} {
		if err := d.Input(ctx, bad); err == nil {
			t.Errorf("bad input %+v accepted", bad.Kind)
		}
	}
	select {
	case e := <-tw.clicks:
		t.Errorf("a refused input clicked at %d,%d", e.EventX, e.EventY)
	default:
	}
}

// TestDamageWatchSeesChanges: a window drawn on the screen is reported;
// an unchanged screen is not.
func TestDamageWatchSeesChanges(t *testing.T) {
	t.Parallel()
	d := startDesktop(t, 320, 240)
	w, err := d.WatchDamage()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	select { // the X server may report the screen once as the watch starts
	case <-w.Changed():
	case <-time.After(300 * time.Millisecond):
	}
	select {
	case <-w.Changed():
		t.Fatal("an unchanged screen reported damage")
	case <-time.After(300 * time.Millisecond):
	}
	openWindow(t, d, 10, 10, 50, 50)
	select {
	case <-w.Changed():
	case <-time.After(5 * time.Second):
		t.Fatal("a new window reported no damage")
	}
}

// TestWatchDamageBesideBusyConnections starts damage watches while another
// connection of the process takes events: under the race detector, an
// extension's registration in xgb's shared tables at that moment (each
// watch's own, as it was) is reported; the tables are written once, on
// the process's first connection.
func TestWatchDamageBesideBusyConnections(t *testing.T) {
	t.Parallel()
	d := startDesktop(t, 320, 240)
	tw := openWindow(t, d, 10, 10, 200, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop := make(chan struct{})
	clicked := make(chan int)
	go func() { // clicks, each an event the window's connection decodes
		n := 0
		defer func() { clicked <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if click(ctx, d, 50, 60) != nil {
				return
			}
			select {
			case <-tw.clicks:
				n++
			case <-ctx.Done():
				return
			}
		}
	}()
	for range 10 {
		w, err := d.WatchDamage()
		if err != nil {
			close(stop)
			<-clicked
			t.Fatal(err)
		}
		w.Close()
	}
	close(stop)
	if n := <-clicked; n == 0 {
		t.Error("no click reached the window while the watches started")
	}
}

// click moves the pointer to x,y and clicks its first button there.
func click(ctx context.Context, d *Desktop, x, y int) error {
	for _, in := range []api.DesktopInput{
		{Kind: api.DesktopPointerMove, X: x, Y: y},
		{Kind: api.DesktopPointerDown, X: x, Y: y, Button: 1},
		{Kind: api.DesktopPointerUp, X: x, Y: y, Button: 1},
	} {
		if err := d.Input(ctx, in); err != nil {
			return err
		}
	}
	return nil
}
