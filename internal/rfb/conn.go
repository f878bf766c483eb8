package rfb

import (
	"bufio"
	"context"
	"crypto/des"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"time"
)

// maxDirty bounds the regions remembered per client; beyond it they merge
// into their bounding box, which costs bytes, never correctness.
const maxDirty = 64

// conn is one VNC client.
type conn struct {
	s  *Server
	nc net.Conn
	// wake is signalled when there may be an update to send.
	wake chan struct{}

	// Guarded by s.mu:
	pf          PixelFormat
	desktopSize bool // the client understands EncodingDesktopSize
	// want is the region of the client's pending update request; empty
	// when none is pending.
	want image.Rectangle
	// full is set when the pending request is non-incremental: all of
	// want is sent, changed or not.
	full bool
	// dirty are the regions changed since the client's last update.
	dirty []image.Rectangle
	// resized is set when the framebuffer's size changed since the
	// client's last update.
	resized bool
}

func (c *conn) wakeLocked() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) addDirtyLocked(r image.Rectangle) {
	for _, d := range c.dirty {
		if r.In(d) {
			return
		}
	}
	c.dirty = append(c.dirty, r)
	if len(c.dirty) > maxDirty {
		u := image.Rectangle{}
		for _, d := range c.dirty {
			u = u.Union(d)
		}
		c.dirty = []image.Rectangle{u}
	}
	if !c.want.Empty() {
		c.wakeLocked()
	}
}

// serve runs the handshake, then reads the client's messages while a
// second goroutine sends its updates, until either fails or ctx ends.
func (c *conn) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { c.nc.Close() })
	defer stop()
	r := bufio.NewReader(c.nc)
	_ = c.nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := c.handshake(ctx, r); err != nil {
		return err
	}
	_ = c.nc.SetDeadline(time.Time{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		defer cancel()
		sent <- c.sendLoop(ctx)
	}()
	err := c.readLoop(r)
	cancel()
	c.nc.Close()
	if serr := <-sent; errors.Is(err, net.ErrClosed) {
		err = serr // the sender's failure closed the connection
	}
	return err
}

func (c *conn) handshake(ctx context.Context, r *bufio.Reader) error {
	if _, err := io.WriteString(c.nc, Version); err != nil {
		return err
	}
	var v [12]byte
	if _, err := io.ReadFull(r, v[:]); err != nil {
		return fmt.Errorf("read the protocol version: %w", err)
	}
	minor := 0
	switch string(v[:]) {
	case "RFB 003.003\n":
		minor = 3
	case "RFB 003.007\n":
		minor = 7
	case "RFB 003.008\n":
		minor = 8
	default:
		// Clients announcing later versions must accept 3.8 (RFC 6143
		// §7.1.1); others speak something else.
		var maj, mnr int
		if _, err := fmt.Sscanf(string(v[:]), "RFB %03d.%03d\n", &maj, &mnr); err != nil || maj < 3 || maj == 3 && mnr < 8 {
			return fmt.Errorf("unsupported protocol version %q", v[:])
		}
		minor = 8
	}
	secType := byte(SecurityNone)
	if c.s.opts.Password != "" {
		secType = SecurityVNCAuth
	}
	if minor == 3 {
		if _, err := c.nc.Write(binary.BigEndian.AppendUint32(nil, uint32(secType))); err != nil {
			return err
		}
	} else {
		if _, err := c.nc.Write([]byte{1, secType}); err != nil {
			return err
		}
		chosen, err := r.ReadByte()
		if err != nil {
			return fmt.Errorf("read the security type: %w", err)
		}
		if chosen != secType {
			c.securityResult(minor, false, "The security type offered is the only one accepted.")
			return fmt.Errorf("client chose security type %d, offered %d", chosen, secType)
		}
	}
	if secType == SecurityVNCAuth {
		ok, err := c.vncAuth(r)
		if err != nil {
			return err
		}
		if !ok {
			t := time.NewTimer(authFailureDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			c.securityResult(minor, false, "Authentication failed: the password is wrong.")
			return errors.New("wrong VNC password")
		}
		if err := c.securityResult(minor, true, ""); err != nil {
			return err
		}
	} else if minor == 8 {
		// 3.8 sends a result for None too; 3.3 and 3.7 do not.
		if err := c.securityResult(minor, true, ""); err != nil {
			return err
		}
	}
	if _, err := r.ReadByte(); err != nil { // ClientInit's shared flag: every client shares
		return fmt.Errorf("read ClientInit: %w", err)
	}
	c.s.mu.Lock()
	w, h := c.s.fb.Rect.Dx(), c.s.fb.Rect.Dy()
	c.s.mu.Unlock()
	b := binary.BigEndian.AppendUint16(nil, uint16(w))
	b = binary.BigEndian.AppendUint16(b, uint16(h))
	b = defaultFormat.append(b)
	b = appendString(b, c.s.opts.Name)
	_, err := c.nc.Write(b)
	return err
}

// vncAuth runs VNC Authentication: the client encrypts a random challenge
// with DES keyed by the password (RFC 6143 §7.2.2).
func (c *conn) vncAuth(r *bufio.Reader) (bool, error) {
	var challenge, response [16]byte
	if _, err := rand.Read(challenge[:]); err != nil {
		return false, err
	}
	if _, err := c.nc.Write(challenge[:]); err != nil {
		return false, err
	}
	if _, err := io.ReadFull(r, response[:]); err != nil {
		return false, fmt.Errorf("read the authentication response: %w", err)
	}
	want, err := EncryptChallenge(c.s.opts.Password, challenge[:])
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(want, response[:]) == 1, nil
}

// EncryptChallenge returns the response to a VNC Authentication challenge
// for password: the challenge DES-encrypted (ECB) with the password's first
// 8 bytes, zero-padded, each byte's bits reversed, as VNC clients do.
func EncryptChallenge(password string, challenge []byte) ([]byte, error) {
	var key [8]byte
	copy(key[:], password)
	for i, b := range key {
		var rev byte
		for j := range 8 {
			if b&(1<<j) != 0 {
				rev |= 0x80 >> j
			}
		}
		key[i] = rev
	}
	block, err := des.NewCipher(key[:]) //nolint:gosec // the protocol's cipher, not a choice
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(challenge))
	for i := 0; i+8 <= len(challenge); i += 8 {
		block.Encrypt(out[i:i+8], challenge[i:i+8])
	}
	return out, nil
}

func (c *conn) securityResult(minor int, ok bool, reason string) error {
	if ok {
		_, err := c.nc.Write([]byte{0, 0, 0, 0})
		return err
	}
	b := []byte{0, 0, 0, 1}
	if minor == 8 {
		b = appendString(b, reason)
	}
	_, err := c.nc.Write(b)
	return err
}

// Client-to-server message types (RFC 6143 §7.5).
const (
	msgSetPixelFormat           = 0
	msgSetEncodings             = 2
	msgFramebufferUpdateRequest = 3
	msgKeyEvent                 = 4
	msgPointerEvent             = 5
	msgClientCutText            = 6
)

func (c *conn) readLoop(r *bufio.Reader) error {
	be := binary.BigEndian
	for {
		t, err := r.ReadByte()
		if err != nil {
			return err
		}
		switch t {
		case msgSetPixelFormat:
			var b [19]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return err
			}
			pf := parsePixelFormat(b[3:])
			if err := pf.check(); err != nil {
				return err
			}
			c.s.mu.Lock()
			c.pf = pf
			c.s.mu.Unlock()
		case msgSetEncodings:
			var b [3]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return err
			}
			encs := make([]byte, 4*int(be.Uint16(b[1:])))
			if _, err := io.ReadFull(r, encs); err != nil {
				return err
			}
			ds := false
			for i := 0; i < len(encs); i += 4 {
				if int32(be.Uint32(encs[i:])) == EncodingDesktopSize {
					ds = true
				}
			}
			c.s.mu.Lock()
			c.desktopSize = ds
			c.s.mu.Unlock()
		case msgFramebufferUpdateRequest:
			var b [9]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return err
			}
			x, y := int(be.Uint16(b[1:])), int(be.Uint16(b[3:]))
			want := image.Rect(x, y, x+int(be.Uint16(b[5:])), y+int(be.Uint16(b[7:])))
			c.s.mu.Lock()
			c.want = c.want.Union(want.Intersect(c.s.fb.Rect))
			if c.want.Empty() {
				// A request outside the framebuffer still deserves an
				// answer, or the client waits forever.
				c.want = image.Rect(0, 0, 1, 1).Intersect(c.s.fb.Rect)
			}
			c.full = c.full || b[0] == 0
			c.wakeLocked()
			c.s.mu.Unlock()
		case msgKeyEvent:
			var b [7]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return err
			}
			if c.s.opts.OnKey != nil {
				c.s.opts.OnKey(b[0] != 0, be.Uint32(b[3:]))
			}
		case msgPointerEvent:
			var b [5]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return err
			}
			if c.s.opts.OnPointer != nil {
				w, h := c.s.Size()
				x, y := min(int(be.Uint16(b[1:])), w-1), min(int(be.Uint16(b[3:])), h-1)
				c.s.opts.OnPointer(b[0], max(x, 0), max(y, 0))
			}
		case msgClientCutText:
			var b [7]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return err
			}
			n := be.Uint32(b[3:])
			if n > maxCutText {
				return fmt.Errorf("clipboard text of %d bytes is over the %d accepted", n, maxCutText)
			}
			if _, err := r.Discard(int(n)); err != nil {
				return err
			}
		default:
			// Messages carry no length, so an unknown one cannot be skipped.
			return fmt.Errorf("unknown client message type %d", t)
		}
	}
}

// sendLoop answers the client's update requests as regions change.
func (c *conn) sendLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		}
		msg, drop := c.nextUpdate()
		if drop != nil {
			return drop
		}
		if msg == nil {
			continue
		}
		if _, err := c.nc.Write(msg); err != nil {
			return err
		}
	}
}

// nextUpdate builds the FramebufferUpdate that answers the pending
// request, or nil when there is nothing to send yet.
func (c *conn) nextUpdate() ([]byte, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	// Updates answer requests only (RFC 6143 §7.5.3), a new size too.
	if c.want.Empty() {
		return nil, nil
	}
	fb := c.s.fb
	var rects []image.Rectangle
	var pseudo []image.Rectangle
	if c.resized {
		if !c.desktopSize {
			return nil, errors.New("the desktop changed size and the client cannot follow (no DesktopSize support): reconnect")
		}
		pseudo = append(pseudo, fb.Rect)
		rects = append(rects, fb.Rect)
	} else if c.full {
		rects = append(rects, c.want)
	} else {
		for _, d := range c.dirty {
			if r := d.Intersect(c.want); !r.Empty() {
				rects = append(rects, r)
			}
		}
	}
	if len(rects) == 0 {
		return nil, nil
	}
	// What is sent is no longer dirty; what lies outside the request
	// stays for a later one.
	var left []image.Rectangle
	if !c.resized && !c.full {
		for _, d := range c.dirty {
			if !d.In(c.want) {
				left = append(left, d)
			}
		}
	}
	c.dirty, c.want, c.full, c.resized = left, image.Rectangle{}, false, false
	b := make([]byte, 0, 4+len(rects)*(12+16*16*4))
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(pseudo)+len(rects)))
	for _, r := range pseudo {
		b = appendRectHeader(b, image.Rect(0, 0, r.Dx(), r.Dy()), EncodingDesktopSize)
	}
	for _, r := range rects {
		b = appendRectHeader(b, r, EncodingRaw)
		b = c.pf.appendPixels(b, fb, r)
	}
	return b, nil
}

func appendRectHeader(b []byte, r image.Rectangle, enc int32) []byte {
	for _, v := range []int{r.Min.X, r.Min.Y, r.Dx(), r.Dy()} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	return binary.BigEndian.AppendUint32(b, uint32(enc))
}

// appendString appends a u32 length and s.
func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
