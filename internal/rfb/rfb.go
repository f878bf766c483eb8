// Package rfb serves the subset of the Remote Framebuffer protocol
// (RFB 3.8, RFC 6143) that a standard VNC client needs to watch and drive
// a desktop held in memory: the 3.3, 3.7 and 3.8 handshakes, security
// types None and VNC Authentication (RFC 6143 §7.2.2), true-colour pixel
// formats of 8, 16 and 32 bits, the Raw encoding and the DesktopSize
// pseudo-encoding. Updates are sent only for regions that changed since
// a client's last incremental request.
//
// The package knows no network beyond the net.Listener it is handed and
// no desktop beyond the images Update draws; callers decide where it
// listens and what input means (Options.OnKey, Options.OnPointer).
package rfb

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Version is the protocol version the server announces.
const Version = "RFB 003.008\n"

// Encodings the server speaks (RFC 6143 §7.7, §7.8).
const (
	EncodingRaw         int32 = 0
	EncodingDesktopSize int32 = -223
)

// Security types (RFC 6143 §7.2).
const (
	SecurityNone    = 1
	SecurityVNCAuth = 2
)

// DefaultMaxClients is how many VNC clients are served at once when
// Options.MaxClients is 0.
const DefaultMaxClients = 4

// handshakeTimeout bounds a client's handshake, so a connection that says
// nothing does not hold a client slot.
const handshakeTimeout = 10 * time.Second

// authFailureDelay slows down password guessing: a wrong password costs
// the guesser this long before the refusal.
const authFailureDelay = time.Second

// maxCutText bounds the clipboard text a client may send; it is read and
// dropped.
const maxCutText = 1 << 20

// Options configure a Server.
type Options struct {
	// Password, when not empty, makes clients pass VNC Authentication;
	// only its first 8 bytes count, as the protocol's DES key holds 8.
	// Empty offers security type None: anyone who reaches the port may
	// connect.
	Password string
	// Name is the desktop's name shown by clients; "" means "outpost".
	Name string
	// MaxClients bounds the clients served at once; 0 means
	// DefaultMaxClients. Clients beyond it are refused at once.
	MaxClients int
	// OnKey, when not nil, receives each key event: down or up, and the
	// X keysym. Nil drops key events (a view-only server).
	OnKey func(down bool, keysym uint32)
	// OnPointer, when not nil, receives each pointer event: the button
	// mask (bit 0 the left button … bit 7) and the position, already
	// clipped to the framebuffer. Nil drops pointer events.
	OnPointer func(mask uint8, x, y int)
	// Logger gets connection-level events; nil discards them.
	Logger *slog.Logger
}

// Server holds a framebuffer and serves it to VNC clients. Its methods
// are safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger

	mu sync.Mutex // guards the following
	fb *image.RGBA
	// conns are the clients past their handshake, and those in it (so
	// MaxClients counts both).
	conns map[*conn]struct{}
}

// NewServer returns a server of a width×height black framebuffer.
func NewServer(width, height int, opts Options) *Server {
	if opts.Name == "" {
		opts.Name = "outpost"
	}
	if opts.MaxClients <= 0 {
		opts.MaxClients = DefaultMaxClients
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{opts: opts, log: log, fb: image.NewRGBA(image.Rect(0, 0, width, height)), conns: map[*conn]struct{}{}}
}

// Size returns the framebuffer's size.
func (s *Server) Size() (width, height int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fb.Rect.Dx(), s.fb.Rect.Dy()
}

// Update draws img at its bounds' position into the framebuffer (the part
// inside it) and marks that region changed for every client.
func (s *Server) Update(img image.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := img.Bounds().Intersect(s.fb.Rect)
	if r.Empty() {
		return
	}
	draw.Draw(s.fb, r, img, r.Min, draw.Src)
	for c := range s.conns {
		c.addDirtyLocked(r)
	}
}

// Resize gives the framebuffer a new size, black. Clients that understand
// the DesktopSize pseudo-encoding are told; the others are disconnected,
// since they cannot follow, and may reconnect.
func (s *Server) Resize(width, height int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fb.Rect.Dx() == width && s.fb.Rect.Dy() == height {
		return
	}
	s.fb = image.NewRGBA(image.Rect(0, 0, width, height))
	for c := range s.conns {
		c.resized = true
		c.dirty = nil
		c.wakeLocked()
	}
}

// Serve accepts clients on ln until ctx ends or ln fails, serving each in
// its own goroutine, and returns once every client is gone. It closes ln.
// The end of ctx is a clean return (nil).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer ln.Close()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept VNC clients: %w", err)
		}
		c, ok := s.admit(nc)
		if !ok {
			s.log.Info("vnc: client refused: too many clients", "remote", nc.RemoteAddr().String())
			refuse(nc, fmt.Sprintf("At most %d VNC clients may connect at once.", s.opts.MaxClients))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.drop(c)
			err := c.serve(ctx)
			switch {
			case err == nil || ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
				s.log.Info("vnc: client left", "remote", nc.RemoteAddr().String())
			default:
				s.log.Info("vnc: client dropped", "remote", nc.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// Clients returns how many clients are connected.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) admit(nc net.Conn) (*conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) >= s.opts.MaxClients {
		return nil, false
	}
	c := &conn{s: s, nc: nc, wake: make(chan struct{}, 1), pf: defaultFormat}
	s.conns[c] = struct{}{}
	return c, true
}

func (s *Server) drop(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.nc.Close()
}

// refuse tells a client past nothing but the version why it may not
// connect (a security-type list of zero and a reason, RFC 6143 §7.1.2),
// then closes the connection.
func refuse(nc net.Conn, reason string) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.WriteString(nc, Version); err != nil {
		return
	}
	var v [12]byte
	if _, err := io.ReadFull(nc, v[:]); err != nil {
		return
	}
	b := []byte{0}
	if string(v[:]) == "RFB 003.003\n" {
		b = []byte{0, 0, 0, 0}
	}
	_, _ = nc.Write(appendString(b, reason))
}
