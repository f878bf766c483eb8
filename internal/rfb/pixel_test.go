package rfb

import (
	"bytes"
	"image"
	"image/color"
	"testing"
)

// TestPixelFormats: the pixels a client asked for, in its bits, shifts and
// byte order.
func TestPixelFormats(t *testing.T) {
	t.Parallel()
	img := image.NewRGBA(image.Rect(0, 0, 2, 1))
	img.Set(0, 0, color.RGBA{0xff, 0x00, 0x00, 0xff})
	img.Set(1, 0, color.RGBA{0x00, 0x80, 0xff, 0xff})
	for _, c := range []struct {
		name string
		pf   PixelFormat
		want []byte
	}{
		{"default", defaultFormat, []byte{0x00, 0x00, 0xff, 0, 0xff, 0x80, 0x00, 0}},
		{"32 big-endian", PixelFormat{BitsPerPixel: 32, Depth: 24, BigEndian: true, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 16, GreenShift: 8},
			[]byte{0, 0xff, 0, 0, 0, 0, 0x80, 0xff}},
		{"RGB565 big-endian", PixelFormat{BitsPerPixel: 16, Depth: 16, BigEndian: true, TrueColour: true, RedMax: 31, GreenMax: 63, BlueMax: 31, RedShift: 11, GreenShift: 5},
			[]byte{0xf8, 0x00, 0x04, 0x1f}},
		{"BGR233", PixelFormat{BitsPerPixel: 8, Depth: 8, TrueColour: true, RedMax: 7, GreenMax: 7, BlueMax: 3, RedShift: 0, GreenShift: 3, BlueShift: 6},
			[]byte{0x07, 0xe0}},
	} {
		if got := c.pf.appendPixels(nil, img, img.Rect); !bytes.Equal(got, c.want) {
			t.Errorf("%s: % x, want % x", c.name, got, c.want)
		}
		if err := c.pf.check(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	for _, pf := range []PixelFormat{{BitsPerPixel: 8}, {BitsPerPixel: 24, TrueColour: true}, {BitsPerPixel: 16, TrueColour: true, RedShift: 16}} {
		if pf.check() == nil {
			t.Errorf("%+v accepted", pf)
		}
	}
}
