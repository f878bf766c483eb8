package rfb_test

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/draw"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/rfb"
	"github.com/outpost-sh/outpost/internal/rfb/rfbtest"
	"github.com/outpost-sh/outpost/internal/waitfor"
)

const step = 5 * time.Second

type events struct {
	mu   sync.Mutex
	keys []uint32
	ptrs [][3]int
}

func serve(t testing.TB, w, h int, opts rfb.Options) (*rfb.Server, string) {
	t.Helper()
	s := rfb.NewServer(w, h, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, ln.Addr().String()
}

func solid(r image.Rectangle, c color.RGBA) *image.RGBA {
	img := image.NewRGBA(r)
	draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
	return img
}

// same reports whether two images hold the same pixels.
func same(a, b *image.RGBA) bool {
	return a.Rect == b.Rect && bytes.Equal(a.Pix, b.Pix)
}

// TestServer: a client that knows the password gets the whole framebuffer
// on a full request, then only the changed region on an incremental one,
// nothing while nothing changes, the new size when it changes; its key and
// pointer events reach the callbacks.
func TestServer(t *testing.T) {
	t.Parallel()
	var ev events
	s, addr := serve(t, 200, 100, rfb.Options{Password: "s3cretpw", Name: "test desk",
		OnKey: func(down bool, sym uint32) {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			if down {
				ev.keys = append(ev.keys, sym)
			}
		},
		OnPointer: func(mask uint8, x, y int) {
			ev.mu.Lock()
			defer ev.mu.Unlock()
			ev.ptrs = append(ev.ptrs, [3]int{int(mask), x, y})
		}})
	s.Update(solid(image.Rect(0, 0, 200, 100), color.RGBA{0x10, 0x20, 0x30, 0xff}))

	c, err := rfbtest.Dial(addr, "s3cretpw", step)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Name != "test desk" || c.FB.Rect.Dx() != 200 || c.FB.Rect.Dy() != 100 {
		t.Fatalf("ServerInit: %q %v", c.Name, c.FB.Rect)
	}
	if err := c.Request(false); err != nil {
		t.Fatal(err)
	}
	u, err := c.ReadUpdate(step)
	if err != nil {
		t.Fatal(err)
	}
	want := solid(image.Rect(0, 0, 200, 100), color.RGBA{0x10, 0x20, 0x30, 0xff})
	if len(u.Rects) != 1 || !same(c.FB, want) {
		t.Fatalf("full update %+v: the framebuffer differs", u)
	}

	// Nothing changed: an incremental request waits.
	if err := c.Request(true); err != nil {
		t.Fatal(err)
	}
	if u, err := c.ReadUpdate(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("an unchanged framebuffer sent %+v, %v", u, err)
	}
	// The timed-out read consumed nothing; the pending request is answered
	// with just the changed rectangle.
	tile := image.Rect(64, 32, 128, 64)
	s.Update(solid(tile, color.RGBA{0xc0, 0x30, 0x20, 0xff}))
	u, err = c.ReadUpdate(step)
	if err != nil {
		t.Fatal(err)
	}
	draw.Draw(want, tile, &image.Uniform{color.RGBA{0xc0, 0x30, 0x20, 0xff}}, image.Point{}, draw.Src)
	if len(u.Rects) != 1 || u.Rects[0] != tile || !same(c.FB, want) {
		t.Fatalf("incremental update %+v, want only %v", u, tile)
	}

	// Input reaches the callbacks, clipped to the framebuffer.
	if err := c.Key(true, 0xff0d); err != nil {
		t.Fatal(err)
	}
	if err := c.Pointer(1, 500, 50); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, "the input events", func() bool {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		return len(ev.keys) == 1 && len(ev.ptrs) == 1
	})
	if ev.keys[0] != 0xff0d || ev.ptrs[0] != [3]int{1, 199, 50} {
		t.Errorf("events %x %v", ev.keys, ev.ptrs)
	}

	// A new size reaches a client that speaks DesktopSize.
	s.Resize(320, 240)
	s.Update(solid(image.Rect(0, 0, 320, 240), color.RGBA{0, 0x80, 0, 0xff}))
	if err := c.Request(true); err != nil {
		t.Fatal(err)
	}
	u, err = c.ReadUpdate(step)
	if err != nil {
		t.Fatal(err)
	}
	if !u.Resized || !same(c.FB, solid(image.Rect(0, 0, 320, 240), color.RGBA{0, 0x80, 0, 0xff})) {
		t.Fatalf("after a resize: %+v, framebuffer %v", u, c.FB.Rect)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestServerRefusals: a wrong password, a missing one and a client beyond
// MaxClients are refused with a reason.
func TestServerRefusals(t *testing.T) {
	t.Parallel()
	s, addr := serve(t, 64, 64, rfb.Options{Password: "right", MaxClients: 1})
	if _, err := rfbtest.Dial(addr, "wrong", step); !errors.Is(err, rfbtest.ErrAuth) {
		t.Errorf("a wrong password: %v, want %v", err, rfbtest.ErrAuth)
	}
	if _, err := rfbtest.Dial(addr, "", step); err == nil {
		t.Error("a client without a password was let in")
	}
	waitfor.True(t, "the refused clients to leave", func() bool { return s.Clients() == 0 })
	c, err := rfbtest.Dial(addr, "right", step)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := rfbtest.Dial(addr, "right", step); err == nil || !bytes.Contains([]byte(err.Error()), []byte("At most 1")) {
		t.Errorf("a second client: %v, want refused", err)
	}
	c.Close()
	waitfor.True(t, "the first client to leave", func() bool { return s.Clients() == 0 })
	c2, err := rfbtest.Dial(addr, "right", step)
	if err != nil {
		t.Fatalf("after the first left: %v", err)
	}
	c2.Close()
}

// TestServerNoPassword: with no password the server offers None.
func TestServerNoPassword(t *testing.T) {
	t.Parallel()
	_, addr := serve(t, 16, 16, rfb.Options{})
	c, err := rfbtest.Dial(addr, "", step)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
