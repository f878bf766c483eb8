package rfb_test

import (
	"image"
	"image/color"
	"testing"
	"time"

	"github.com/outpost-sh/outpost/internal/rfb"
	"github.com/outpost-sh/outpost/internal/rfb/rfbtest"
)

// BenchmarkUpdate measures one changed 64×64 tile (the live view's unit)
// and one full 1280×800 screen, from Update to the client holding the
// pixels, over loopback in the server's own pixel format.
func BenchmarkUpdate(b *testing.B) {
	for _, bc := range []struct {
		name string
		r    image.Rectangle
	}{{"tile64", image.Rect(64, 64, 128, 128)}, {"full1280x800", image.Rect(0, 0, 1280, 800)}} {
		b.Run(bc.name, func(b *testing.B) {
			s, addr := serve(b, 1280, 800, rfb.Options{Password: "bench"})
			c, err := rfbtest.Dial(addr, "bench", 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			imgs := []*image.RGBA{solid(bc.r, color.RGBA{0xff, 0, 0, 0xff}), solid(bc.r, color.RGBA{0, 0, 0xff, 0xff})}
			b.SetBytes(int64(4 * bc.r.Dx() * bc.r.Dy()))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := c.Request(true); err != nil {
					b.Fatal(err)
				}
				s.Update(imgs[i%2])
				if _, err := c.ReadUpdate(5 * time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
