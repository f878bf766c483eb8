package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
	"github.com/outpost-sh/outpost/internal/desktop"
	"github.com/outpost-sh/outpost/internal/rfb"
)

// desktopFirstFrameTimeout bounds the wait for the desktop's first
// keyframe, which gives the VNC server its size.
const desktopFirstFrameTimeout = 30 * time.Second

// handBackTimeout bounds the hand-back sent on the way out.
const handBackTimeout = 5 * time.Second

// vncPasswordLen is the length of a generated password: VNC
// Authentication keys DES with at most 8 bytes.
const vncPasswordLen = 8

// SessionsDesktopOptions are the settings of `outpost sessions desktop`.
type SessionsDesktopOptions struct {
	f  *Factory
	ID string
	// Listen is the loopback address the VNC server listens on.
	Listen string
	// Control takes control of the desktop for the command's life; without
	// it, VNC clients only watch.
	Control bool
	// PasswordFile holds the VNC password; "" generates one.
	PasswordFile string
	// NoPassword offers VNC security type None.
	NoPassword bool
	// ready, when not nil, receives the listening address (tests).
	ready func(addr, password string)
}

// NewCmdSessionsDesktop returns `outpost sessions desktop`.
func NewCmdSessionsDesktop(f *Factory, runF func(context.Context, *SessionsDesktopOptions) error) *cobra.Command {
	opts := &SessionsDesktopOptions{f: f}
	cmd := &cobra.Command{
		Use:   "desktop ID",
		Short: "Serve a session's live desktop to a VNC client on a local port",
		Long: `Open a session's live desktop and serve it on a loopback port to standard
VNC clients (RFB 3.8). The desktop travels from the session's machine over its
gateway connection and the server's live view (the same stream as the web
UI's); nothing listens on the machine, and the local port accepts loopback
addresses only.

VNC clients must pass VNC Authentication with a one-time password the command
generates and prints, or the one in --password-file (at most 8 characters, as
VNC keys its cipher with 8 bytes). Other users of this computer can reach a
loopback port; the password keeps them out. --no-password offers no
authentication at all: use it only on a computer nobody else uses.

By default VNC clients only watch: their keys and pointer are dropped. With
--control the command takes control when it starts (the agent's computer
calls wait; the transcript records the takeover) and hands back when it ends;
VNC clients' input then reaches the desktop. Needs sessions.write.

The command runs until Ctrl-C or the session ends. At most
4 VNC clients may connect at once. A client that cannot follow a change of
the desktop's size (no DesktopSize support) is disconnected and may
reconnect.`,
		Example: `  outpost sessions desktop ses_123
  outpost sessions desktop ses_123 --listen 127.0.0.1:5901 --control
  vncviewer 127.0.0.1::5901`,
		Args: exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if err := opts.validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runSessionsDesktop(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Listen, "listen", "127.0.0.1:0", "loopback address of the VNC server (port 0 picks a free one)")
	fl.BoolVar(&opts.Control, "control", false, "take control so VNC clients' keys and pointer reach the desktop")
	fl.StringVar(&opts.PasswordFile, "password-file", "", "file holding the VNC password (default: a one-time password, printed)")
	fl.BoolVar(&opts.NoPassword, "no-password", false, "accept VNC clients without a password (anyone on this computer)")
	return cmd
}

// validate refuses a non-loopback listen address and conflicting flags.
func (o *SessionsDesktopOptions) validate() error {
	host, port, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return usageErrorf("--listen %q is not HOST:PORT: %v", o.Listen, err)
	}
	if host == "localhost" {
		// Resolving it could give a non-loopback address; this cannot.
		host = "127.0.0.1"
		o.Listen = net.JoinHostPort(host, port)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return usageErrorf("--listen %s is not a loopback address: the VNC server listens on 127.0.0.0/8 or ::1 only, so that it is reachable from this computer alone", o.Listen)
	}
	if o.NoPassword && o.PasswordFile != "" {
		return usageErrorf("--no-password and --password-file cannot both be given")
	}
	return nil
}

// password returns the VNC password: the file's first line, or a random one.
func (o *SessionsDesktopOptions) password() (string, error) {
	if o.NoPassword {
		return "", nil
	}
	if o.PasswordFile == "" {
		return rand.Text()[:vncPasswordLen], nil
	}
	b, err := os.ReadFile(o.PasswordFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("the password file %s does not exist (--password-file)", o.PasswordFile)
	case err != nil:
		return "", fmt.Errorf("read the password file %s: %w", o.PasswordFile, err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" || len(pw) > vncPasswordLen {
		return "", fmt.Errorf("the password in %s must be 1 to %d bytes long: VNC Authentication uses no more", o.PasswordFile, vncPasswordLen)
	}
	return pw, nil
}

// desktopAnnounce is what the command prints once VNC clients may connect.
type desktopAnnounce struct {
	Session  string `json:"session"`
	Address  string `json:"address"`
	Password string `json:"password,omitempty"`
	Control  bool   `json:"control"`
}

func runSessionsDesktop(ctx context.Context, o *SessionsDesktopOptions) error {
	f := o.f
	pw, err := o.password()
	if err != nil {
		return err
	}
	c, err := f.Client()
	if err != nil {
		return err
	}
	d, err := c.Sessions.Desktop(ctx, o.ID)
	if err != nil {
		return err
	}
	defer d.Close()
	if o.Control && !d.Hello.CanControl {
		return fmt.Errorf("--control needs a token with the %s scope; this one may only watch", api.ScopeSessionsWrite)
	}

	// The first keyframe gives the framebuffer its size and content.
	fctx, cancel := context.WithTimeout(ctx, desktopFirstFrameTimeout)
	defer cancel()
	var first *api.DesktopTiles
	for first == nil {
		m, tiles, err := d.Read(fctx)
		if err != nil {
			return desktopEnded(ctx, err, "before its first frame")
		}
		if tiles != nil && tiles.Keyframe {
			first = tiles
		} else if m != nil && m.Type == api.DesktopMsgError {
			fmt.Fprintf(f.IO.ErrOut, "live desktop: %s\n", m.Error)
		}
	}
	in := &vncInput{d: d}
	opts := rfb.Options{Password: pw, Name: "outpost " + o.ID,
		Logger: slog.New(slog.NewTextHandler(f.IO.ErrOut, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if o.Control {
		opts.OnKey, opts.OnPointer = in.key, in.pointer
	}
	srv := rfb.NewServer(first.Width, first.Height, opts)
	if err := drawTiles(srv, *first); err != nil {
		return err
	}

	if o.Control {
		if err := takeControl(ctx, d, srv); err != nil {
			return err
		}
		defer func() {
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
			defer cancel()
			_ = d.Send(hctx, api.DesktopMessage{Type: api.DesktopMsgHandBack})
		}()
	}
	ctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	in.ctx = ctx

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen for VNC clients on %s: %w", o.Listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ann := desktopAnnounce{Session: o.ID, Address: addr.String(), Password: pw, Control: o.Control}
	if f.JSON() {
		if err := printJSON(f.IO.Out, ann); err != nil {
			ln.Close()
			return err
		}
	} else {
		mode := "view only: VNC clients' input is dropped (--control to drive it)"
		if o.Control {
			mode = "in control: VNC clients' input reaches the desktop"
		}
		fmt.Fprintf(f.IO.Out, "Serving the desktop of session %s (%d×%d, %s) on %s\n", o.ID, first.Width, first.Height, mode, addr)
		if pw != "" {
			fmt.Fprintf(f.IO.Out, "VNC password: %s\n", pw)
		} else {
			fmt.Fprintln(f.IO.Out, "No VNC password: any user of this computer can connect.")
		}
		fmt.Fprintf(f.IO.Out, "Connect with: vncviewer %s::%d\nPress Ctrl-C to stop.\n", addr.IP, addr.Port)
	}
	if o.ready != nil {
		o.ready(addr.String(), pw)
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(gctx, ln) })
	g.Go(func() error {
		// The live view stays open, still, after the session ends; its
		// transcript's end event is what says so.
		err := c.Sessions.Follow(gctx, o.ID, 0, func(api.Event) error { return nil })
		if gctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("follow session %s: %w", o.ID, err)
		}
		fmt.Fprintf(f.IO.ErrOut, "Session %s ended.\n", o.ID)
		cancelRun()
		return nil
	})
	g.Go(func() error {
		defer cancelRun() // the desktop ended: stop serving VNC clients
		for {
			m, tiles, err := d.Read(gctx)
			if err != nil {
				return desktopEnded(gctx, err, "")
			}
			switch {
			case tiles != nil:
				if err := drawTiles(srv, *tiles); err != nil {
					return err
				}
			case m.Type == api.DesktopMsgError:
				fmt.Fprintf(f.IO.ErrOut, "live desktop: %s\n", m.Error)
			case m.Type == api.DesktopMsgControl && o.Control && !m.You:
				// Someone else took over (or control was lost): input is
				// refused by the server from now on; say so once.
				fmt.Fprintln(f.IO.ErrOut, "live desktop: control passed to someone else; VNC input is now refused")
			}
		}
	})
	return g.Wait()
}

// takeControl asks for control and waits for the answer, drawing the
// frames that arrive meanwhile.
func takeControl(ctx context.Context, d *client.DesktopConn, srv *rfb.Server) error {
	if err := d.Send(ctx, api.DesktopMessage{Type: api.DesktopMsgTakeControl}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, desktopFirstFrameTimeout)
	defer cancel()
	for {
		m, tiles, err := d.Read(ctx)
		if err != nil {
			return desktopEnded(ctx, err, "while taking control")
		}
		switch {
		case tiles != nil:
			if err := drawTiles(srv, *tiles); err != nil {
				return err
			}
		case m.Type == api.DesktopMsgError:
			return fmt.Errorf("take control of the desktop: %s", m.Error)
		case m.Type == api.DesktopMsgControl && m.You:
			return nil
		}
	}
}

// desktopEnded turns the end of the live view into the command's result:
// nil when the user stopped it, else an error with the server's reason.
func desktopEnded(ctx context.Context, err error, when string) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	if when != "" {
		when = " " + when
	}
	if r := client.DesktopCloseReason(err); r != "" {
		return fmt.Errorf("the live desktop closed%s: %s", when, r)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the live desktop sent nothing%s within %v: the session's desktop may not have started (its first computer call or command starts it)", when, desktopFirstFrameTimeout)
	}
	return fmt.Errorf("the live desktop closed%s: %w", when, err)
}

// drawTiles resizes the framebuffer when the screen's size changed and
// draws the frame's tiles into it.
func drawTiles(srv *rfb.Server, f api.DesktopTiles) error {
	if w, h := srv.Size(); w != f.Width || h != f.Height {
		srv.Resize(f.Width, f.Height)
	}
	for _, t := range f.Tiles {
		img, err := png.Decode(bytes.NewReader(t.PNG))
		if err != nil {
			return fmt.Errorf("decode a desktop tile at %d,%d: %w", t.X, t.Y, err)
		}
		b := img.Bounds()
		dst := image.NewRGBA(image.Rect(t.X, t.Y, t.X+b.Dx(), t.Y+b.Dy()))
		draw.Draw(dst, dst.Rect, img, b.Min, draw.Src)
		srv.Update(dst)
	}
	return nil
}

// vncInput turns VNC clients' key and pointer events into the live
// desktop's input messages.
type vncInput struct {
	d   *client.DesktopConn
	ctx context.Context

	mu sync.Mutex // guards the following
	// mask, x, y are the pointer's last known buttons and position.
	mask uint8
	x, y int
}

func (in *vncInput) send(di api.DesktopInput) {
	if in.ctx == nil {
		return
	}
	// A failed send means the live view is going; its reader reports why.
	_ = in.d.Send(in.ctx, api.DesktopMessage{Type: api.DesktopMsgInput, Input: &di})
}

func (in *vncInput) key(down bool, keysym uint32) {
	name, ok := desktop.KeyName(keysym)
	if !ok {
		return // a key the desktop cannot type (a dead key, a vendor key)
	}
	kind := api.DesktopKeyUp
	if down {
		kind = api.DesktopKeyDown
	}
	in.send(api.DesktopInput{Kind: kind, Key: name})
}

func (in *vncInput) pointer(mask uint8, x, y int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if x != in.x || y != in.y {
		in.x, in.y = x, y
		in.send(api.DesktopInput{Kind: api.DesktopPointerMove, X: x, Y: y})
	}
	// RFB's mask bits 0–6 are X's buttons 1–7 (left, middle, right, the
	// wheel's four directions).
	for bit := range 7 {
		was, is := in.mask&(1<<bit) != 0, mask&(1<<bit) != 0
		switch {
		case is && !was:
			in.send(api.DesktopInput{Kind: api.DesktopPointerDown, Button: bit + 1, X: x, Y: y})
		case was && !is:
			in.send(api.DesktopInput{Kind: api.DesktopPointerUp, Button: bit + 1, X: x, Y: y})
		}
	}
	in.mask = mask
}
