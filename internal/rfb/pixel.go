package rfb

import (
	"encoding/binary"
	"fmt"
	"image"
)

// PixelFormat is how a client wants pixels (RFC 6143 §7.4): only true
// colour is served.
type PixelFormat struct {
	BitsPerPixel, Depth             uint8
	BigEndian, TrueColour           bool
	RedMax, GreenMax, BlueMax       uint16
	RedShift, GreenShift, BlueShift uint8
}

// defaultFormat is the server's own: 32 bits, 8 per channel, little-endian
// 0x00RRGGBB, which most clients keep.
var defaultFormat = PixelFormat{BitsPerPixel: 32, Depth: 24, TrueColour: true,
	RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 16, GreenShift: 8, BlueShift: 0}

func parsePixelFormat(b []byte) PixelFormat {
	be := binary.BigEndian
	return PixelFormat{BitsPerPixel: b[0], Depth: b[1], BigEndian: b[2] != 0, TrueColour: b[3] != 0,
		RedMax: be.Uint16(b[4:]), GreenMax: be.Uint16(b[6:]), BlueMax: be.Uint16(b[8:]),
		RedShift: b[10], GreenShift: b[11], BlueShift: b[12]}
}

// Append appends the 16-byte wire form of pf.
func (pf PixelFormat) append(b []byte) []byte {
	b = append(b, pf.BitsPerPixel, pf.Depth, boolByte(pf.BigEndian), boolByte(pf.TrueColour))
	b = binary.BigEndian.AppendUint16(b, pf.RedMax)
	b = binary.BigEndian.AppendUint16(b, pf.GreenMax)
	b = binary.BigEndian.AppendUint16(b, pf.BlueMax)
	return append(b, pf.RedShift, pf.GreenShift, pf.BlueShift, 0, 0, 0)
}

func (pf PixelFormat) check() error {
	switch {
	case !pf.TrueColour:
		return fmt.Errorf("colour-map pixel formats are not served: ask for true colour")
	case pf.BitsPerPixel != 8 && pf.BitsPerPixel != 16 && pf.BitsPerPixel != 32:
		return fmt.Errorf("a pixel format of %d bits per pixel is not served: use 8, 16 or 32", pf.BitsPerPixel)
	case pf.RedShift >= pf.BitsPerPixel || pf.GreenShift >= pf.BitsPerPixel || pf.BlueShift >= pf.BitsPerPixel:
		return fmt.Errorf("a colour shift is beyond the pixel's %d bits", pf.BitsPerPixel)
	}
	return nil
}

// appendPixels appends the pixels of r in img, row by row, in pf.
func (pf PixelFormat) appendPixels(b []byte, img *image.RGBA, r image.Rectangle) []byte {
	bpp := int(pf.BitsPerPixel) / 8
	fast := pf == defaultFormat
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := img.Pix[img.PixOffset(r.Min.X, y):img.PixOffset(r.Max.X, y)]
		for i := 0; i < len(row); i += 4 {
			if fast {
				b = append(b, row[i+2], row[i+1], row[i], 0)
				continue
			}
			v := scale(row[i], pf.RedMax)<<pf.RedShift | scale(row[i+1], pf.GreenMax)<<pf.GreenShift | scale(row[i+2], pf.BlueMax)<<pf.BlueShift
			for k := range bpp {
				shift := 8 * k
				if pf.BigEndian {
					shift = 8 * (bpp - 1 - k)
				}
				b = append(b, byte(v>>shift))
			}
		}
	}
	return b
}

// scale maps an 8-bit channel onto 0..max, rounding.
func scale(c uint8, max uint16) uint32 {
	return (uint32(c)*uint32(max) + 127) / 255
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
