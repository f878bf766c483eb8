// Package rfbtest is a minimal RFB 3.8 client (RFC 6143) for tests of
// VNC servers: it authenticates with None or VNC Authentication, asks for
// the 32-bit true-colour pixel format and the Raw and DesktopSize
// encodings, keeps the framebuffer it is sent, and sends key and pointer
// events.
package rfbtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"time"

	"github.com/outpost-sh/outpost/internal/rfb"
)

// Client is a connected VNC client. It is not safe for concurrent use.
type Client struct {
	nc net.Conn
	r  *bufio.Reader
	// Name is the desktop's name from ServerInit.
	Name string
	// FB is the framebuffer as received so far.
	FB *image.RGBA
}

// ErrAuth is returned by Dial when the server refused the password.
var ErrAuth = errors.New("VNC authentication failed")

// Dial connects to addr and runs the handshake, with VNC Authentication
// when password is not empty and None otherwise. The connection's reads
// and writes are bounded by timeout each.
func Dial(addr, password string, timeout time.Duration) (*Client, error) {
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, r: bufio.NewReader(nc)}
	_ = nc.SetDeadline(time.Now().Add(timeout))
	if err := c.handshake(password); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.nc.Close() }

func (c *Client) handshake(password string) error {
	be := binary.BigEndian
	var v [12]byte
	if _, err := io.ReadFull(c.r, v[:]); err != nil {
		return fmt.Errorf("read version: %w", err)
	}
	if string(v[:]) != rfb.Version {
		return fmt.Errorf("server version %q", v[:])
	}
	if _, err := io.WriteString(c.nc, rfb.Version); err != nil {
		return err
	}
	n, err := c.r.ReadByte()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("server refused: %s", c.readString())
	}
	types := make([]byte, n)
	if _, err := io.ReadFull(c.r, types); err != nil {
		return err
	}
	want := byte(rfb.SecurityNone)
	if password != "" {
		want = rfb.SecurityVNCAuth
	}
	found := false
	for _, t := range types {
		found = found || t == want
	}
	if !found {
		return fmt.Errorf("server offers security types %v, not %d", types, want)
	}
	if _, err := c.nc.Write([]byte{want}); err != nil {
		return err
	}
	if want == rfb.SecurityVNCAuth {
		var ch [16]byte
		if _, err := io.ReadFull(c.r, ch[:]); err != nil {
			return err
		}
		resp, err := rfb.EncryptChallenge(password, ch[:])
		if err != nil {
			return err
		}
		if _, err := c.nc.Write(resp); err != nil {
			return err
		}
	}
	var res [4]byte
	if _, err := io.ReadFull(c.r, res[:]); err != nil {
		return fmt.Errorf("read security result: %w", err)
	}
	if be.Uint32(res[:]) != 0 {
		return fmt.Errorf("%w: %s", ErrAuth, c.readString())
	}
	if _, err := c.nc.Write([]byte{1}); err != nil { // shared
		return err
	}
	var init [20]byte
	if _, err := io.ReadFull(c.r, init[:]); err != nil {
		return fmt.Errorf("read ServerInit: %w", err)
	}
	c.FB = image.NewRGBA(image.Rect(0, 0, int(be.Uint16(init[0:])), int(be.Uint16(init[2:]))))
	c.Name = c.readString()
	// 32-bit little-endian 0x00RRGGBB, and Raw plus DesktopSize.
	pf := []byte{msgSetPixelFormat, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	enc := []byte{2, 0, 0, 2}
	enc = binary.BigEndian.AppendUint32(enc, uint32(rfb.EncodingRaw))
	ds := rfb.EncodingDesktopSize
	enc = binary.BigEndian.AppendUint32(enc, uint32(ds))
	_, err = c.nc.Write(append(pf, enc...))
	return err
}

const msgSetPixelFormat = 0

func (c *Client) readString() string {
	var l [4]byte
	if _, err := io.ReadFull(c.r, l[:]); err != nil {
		return ""
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > 1<<16 {
		return ""
	}
	b := make([]byte, n)
	_, _ = io.ReadFull(c.r, b)
	return string(b)
}

// Request asks for an update of the whole framebuffer.
func (c *Client) Request(incremental bool) error {
	b := []byte{3, boolByte(incremental), 0, 0, 0, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(c.FB.Rect.Dx()))
	b = binary.BigEndian.AppendUint16(b, uint16(c.FB.Rect.Dy()))
	_, err := c.nc.Write(b)
	return err
}

// Update is one FramebufferUpdate received.
type Update struct {
	// Rects are the Raw rectangles, drawn into FB.
	Rects []image.Rectangle
	// Resized is set when the update carried a DesktopSize rectangle.
	Resized bool
}

// ReadUpdate reads the next FramebufferUpdate, within timeout, and draws
// it into FB.
func (c *Client) ReadUpdate(timeout time.Duration) (Update, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	defer c.nc.SetReadDeadline(time.Time{})
	be := binary.BigEndian
	var u Update
	var h [4]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return u, err
	}
	if h[0] != 0 {
		return u, fmt.Errorf("server message type %d, want a FramebufferUpdate", h[0])
	}
	for range int(be.Uint16(h[2:])) {
		var rh [12]byte
		if _, err := io.ReadFull(c.r, rh[:]); err != nil {
			return u, err
		}
		x, y, w, hh := int(be.Uint16(rh[0:])), int(be.Uint16(rh[2:])), int(be.Uint16(rh[4:])), int(be.Uint16(rh[6:]))
		switch enc := int32(be.Uint32(rh[8:])); enc {
		case rfb.EncodingDesktopSize:
			c.FB = image.NewRGBA(image.Rect(0, 0, w, hh))
			u.Resized = true
		case rfb.EncodingRaw:
			r := image.Rect(x, y, x+w, y+hh)
			if !r.In(c.FB.Rect) {
				return u, fmt.Errorf("rectangle %v outside the framebuffer %v", r, c.FB.Rect)
			}
			px := make([]byte, 4*w*hh)
			if _, err := io.ReadFull(c.r, px); err != nil {
				return u, err
			}
			for row := range hh {
				for col := range w {
					p := px[4*(row*w+col):]
					o := c.FB.PixOffset(x+col, y+row)
					c.FB.Pix[o], c.FB.Pix[o+1], c.FB.Pix[o+2], c.FB.Pix[o+3] = p[2], p[1], p[0], 0xff
				}
			}
			u.Rects = append(u.Rects, r)
		default:
			return u, fmt.Errorf("unexpected encoding %d", enc)
		}
	}
	return u, nil
}

// Key sends a key event of an X keysym.
func (c *Client) Key(down bool, keysym uint32) error {
	b := binary.BigEndian.AppendUint32([]byte{4, boolByte(down), 0, 0}, keysym)
	_, err := c.nc.Write(b)
	return err
}

// Pointer sends a pointer event.
func (c *Client) Pointer(mask uint8, x, y int) error {
	b := binary.BigEndian.AppendUint16([]byte{5, mask}, uint16(x))
	b = binary.BigEndian.AppendUint16(b, uint16(y))
	_, err := c.nc.Write(b)
	return err
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
