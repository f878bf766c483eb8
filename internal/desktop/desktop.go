// Package desktop gives a session a screen of its own: a virtual X display
// (Xvfb) with a light window manager, started on first use and torn down
// with the session, and the input and capture that the computer tool and a
// live view need, spoken over the X protocol (XTEST for input, GetImage for
// frames) from Go.
package desktop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
	"github.com/outpost-sh/outpost/api"
)

// Default size of a desktop whose session names none.
const (
	DefaultWidth  = api.DefaultDesktopWidth
	DefaultHeight = api.DefaultDesktopHeight
)

// Bounds of a desktop's size: small enough for Xvfb's framebuffer to stay
// modest, large enough for any laptop screen.
const (
	MinSize = api.MinDesktopSize
	MaxSize = api.MaxDesktopSize
)

// startTimeout bounds how long Xvfb may take to name its display.
const startTimeout = 15 * time.Second

// WindowManagers are the window managers Start tries, in order, when
// Options.WindowManager is empty: light ones Debian packages.
var WindowManagers = []string{"matchbox-window-manager", "openbox", "fluxbox", "twm"}

func init() {
	// xgb logs to its own package-level logger (stderr); its messages
	// ("could not get authority info…") are not errors for us.
	xgb.Logger = log.New(io.Discard, "", 0)
}

// Options configure Start. The zero value is a 1280×800 desktop with the
// first window manager of WindowManagers that is installed.
type Options struct {
	// Width and Height are the display's size in pixels; 0 means
	// DefaultWidth and DefaultHeight.
	Width, Height int
	// WindowManager is the program run on the display; "" tries
	// WindowManagers, "none" runs none. A missing one is not an error.
	WindowManager string
	// XvfbPath is the Xvfb binary; "" looks it up in PATH.
	XvfbPath string
	// AuthDir is where the display's authority file is made (in a
	// directory of its own, removed by Close); "" means os.TempDir().
	AuthDir string
	// Env is the environment of Xvfb and the window manager; nil means
	// the process's.
	Env []string
	// Logger gets the desktop's lifecycle; nil discards.
	Logger *slog.Logger
}

// ErrNoXvfb is returned by Start on a machine without Xvfb.
var ErrNoXvfb = errors.New("this machine has no Xvfb: install it (apt-get install xvfb) to give sessions a desktop")

// XvfbPath returns the Xvfb binary found in PATH, or "".
func XvfbPath() string {
	p, err := exec.LookPath("Xvfb")
	if err != nil {
		return ""
	}
	return p
}

// Desktop is a running X display: a virtual one Start made, or an existing
// one Attach connected to. Its methods are safe for concurrent use.
type Desktop struct {
	display       string
	width, height int
	// authFile holds the display's cookie ($XAUTHORITY of its clients);
	// "" for an attached display.
	authFile, authDir string
	cookie            []byte
	wmName            string
	log               *slog.Logger

	conn *xgb.Conn
	root xproto.Window

	// xvfb and wm are the processes Start made; nil for an attached
	// display. exited is closed when Xvfb has been waited for.
	xvfb, wm *exec.Cmd
	exited   chan struct{}

	// inputMu serialises input actions, so that the presses and releases
	// of two calls never interleave; it guards the following.
	inputMu sync.Mutex
	keys    *keymap
	buttons map[byte]bool // buttons held down by left_mouse_down

	closeOnce sync.Once
	closeErr  error
}

// Start starts Xvfb on a free display number (Xvfb picks it and writes it
// to a pipe: -displayfd, so two desktops never race for a number), then a
// window manager when one is found, and connects to the display.
func Start(ctx context.Context, opts Options) (*Desktop, error) {
	w, h := opts.Width, opts.Height
	if w == 0 {
		w = DefaultWidth
	}
	if h == 0 {
		h = DefaultHeight
	}
	if err := CheckSize(w, h); err != nil {
		return nil, err
	}
	path := opts.XvfbPath
	if path == "" {
		if path = XvfbPath(); path == "" {
			return nil, ErrNoXvfb
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cookie, err := newCookie()
	if err != nil {
		return nil, fmt.Errorf("start desktop: %w", err)
	}
	dir, err := authDir(opts.AuthDir)
	if err != nil {
		return nil, fmt.Errorf("start desktop: %w", err)
	}
	authFile := filepath.Join(dir, "Xauthority")
	if err := writeAuthority(authFile, "", cookie); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start desktop: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start desktop: %w", err)
	}
	defer pr.Close()
	// -nolisten tcp: the display is reached through its Unix socket only,
	// so nothing listens on the network; -auth: only clients with the
	// cookie get in.
	cmd := exec.Command(path, "-displayfd", "3", "-screen", "0", fmt.Sprintf("%dx%dx24", w, h),
		"-nolisten", "tcp", "-noreset", "+extension", "XTEST", "-auth", authFile)
	cmd.Env = opts.Env
	cmd.ExtraFiles = []*os.File{pw}
	stderr := &lastLines{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		pw.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start desktop: run Xvfb: %w", err)
	}
	pw.Close()
	d := &Desktop{width: w, height: h, log: logger, xvfb: cmd, exited: make(chan struct{}), buttons: map[byte]bool{},
		authFile: authFile, authDir: dir, cookie: cookie}
	go func() {
		_ = cmd.Wait()
		close(d.exited)
	}()

	num := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		num <- strings.TrimSpace(line)
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case n := <-num:
		if _, err := strconv.Atoi(n); err != nil {
			d.Close()
			return nil, fmt.Errorf("start desktop: Xvfb named no display: %s", stderr.String())
		}
		d.display = ":" + n
		// Clients look the cookie up by display number.
		if err := writeAuthority(authFile, n, cookie); err != nil {
			d.Close()
			return nil, fmt.Errorf("start desktop: %w", err)
		}
	case <-ctx.Done():
		d.Close()
		return nil, fmt.Errorf("start desktop: %w", ctx.Err())
	case <-timer.C:
		d.Close()
		return nil, fmt.Errorf("start desktop: Xvfb named no display within %s: %s", startTimeout, stderr.String())
	}
	netConn, err := dialDisplay(strings.TrimPrefix(d.display, ":"), cookie)
	if err == nil {
		err = d.connect(netConn)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("start desktop: connect to display %s: %w", d.display, err)
	}
	d.startWM(opts)
	logger.Info("desktop started", "display", d.display, "width", w, "height", h, "window_manager", d.wmName)
	return d, nil
}

// Attach connects to an existing display (a real screen, or one another
// program made); Close then only disconnects.
func Attach(ctx context.Context, display string, logger *slog.Logger) (*Desktop, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Desktop{display: display, log: logger, buttons: map[byte]bool{}}
	if err := d.connect(nil); err != nil {
		return nil, fmt.Errorf("connect to display %s: %w", display, err)
	}
	scr := xproto.Setup(d.conn).DefaultScreen(d.conn)
	d.width, d.height = int(scr.WidthInPixels), int(scr.HeightInPixels)
	return d, nil
}

// CheckSize says whether w×h is a size a desktop may have.
func CheckSize(w, h int) error {
	if w < MinSize || h < MinSize || w > MaxSize || h > MaxSize {
		return fmt.Errorf("desktop size %d×%d is out of bounds: width and height must be %d to %d pixels", w, h, MinSize, MaxSize)
	}
	return nil
}

// connect speaks X over netConn, or dials d.display (with the process's
// $XAUTHORITY) when it is nil.
func (d *Desktop) connect(netConn net.Conn) error {
	var conn *xgb.Conn
	var err error
	if netConn != nil {
		conn, err = openX(func() (*xgb.Conn, error) { return xgb.NewConnNet(netConn) })
	} else {
		conn, err = openX(func() (*xgb.Conn, error) { return xgb.NewConnDisplay(d.display) })
	}
	if err != nil {
		if netConn != nil {
			netConn.Close()
		}
		return err
	}
	if err := xtest.Init(conn); err != nil {
		conn.Close()
		return fmt.Errorf("display %s has no XTEST extension, so input cannot be sent: %w", d.display, err)
	}
	d.conn = conn
	d.root = xproto.Setup(conn).DefaultScreen(conn).Root
	km, err := loadKeymap(conn)
	if err != nil {
		conn.Close()
		d.conn = nil
		return fmt.Errorf("display %s: %w", d.display, err)
	}
	d.keys = km
	return nil
}

// startWM runs the first window manager found; a desktop without one still
// works (windows keep the place their programs ask for).
func (d *Desktop) startWM(opts Options) {
	names := WindowManagers
	switch opts.WindowManager {
	case "none":
		return
	case "":
	default:
		names = []string{opts.WindowManager}
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	env = append(withoutDisplay(env), d.Env()...)
	for _, name := range names {
		path, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		cmd := exec.Command(path)
		cmd.Env = env
		cmd.SysProcAttr = procAttr()
		if err := cmd.Start(); err != nil {
			d.log.Warn("desktop: window manager did not start", "program", name, "err", err)
			continue
		}
		d.wm, d.wmName = cmd, name
		return
	}
	d.log.Info("desktop: no window manager found; windows keep the place their programs ask for", "tried", strings.Join(names, ", "))
}

func withoutDisplay(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "DISPLAY=") && !strings.HasPrefix(kv, "XAUTHORITY=") {
			out = append(out, kv)
		}
	}
	return out
}

// Env is what a program needs to use the display: DISPLAY, and
// XAUTHORITY (the file with its cookie) for a display Start made.
func (d *Desktop) Env() []string {
	env := []string{"DISPLAY=" + d.display}
	if d.authFile != "" {
		env = append(env, "XAUTHORITY="+d.authFile)
	}
	return env
}

// Display is the X display name (":7"), the value of $DISPLAY for the
// session's programs.
func (d *Desktop) Display() string { return d.display }

// Size is the display's size in pixels.
func (d *Desktop) Size() (width, height int) { return d.width, d.height }

// WindowManager names the window manager running, "" when none.
func (d *Desktop) WindowManager() string { return d.wmName }

// Close ends the window manager and Xvfb (which removes its socket and
// lock file) and waits for them. It is safe to call more than once.
func (d *Desktop) Close() error {
	d.closeOnce.Do(func() {
		if d.conn != nil {
			d.conn.Close()
		}
		if d.wm != nil {
			stopGroup(d.wm, nil)
		}
		if d.xvfb != nil {
			d.closeErr = stopGroup(d.xvfb, d.exited)
		}
		if d.authDir != "" {
			if err := os.RemoveAll(d.authDir); err != nil && d.closeErr == nil {
				d.closeErr = fmt.Errorf("remove the display's authority file: %w", err)
			}
		}
		d.log.Info("desktop stopped", "display", d.display)
	})
	return d.closeErr
}

// Capture reads the pixels of r (the whole screen when r is empty) at full
// resolution. It is the frame source of the computer tool's screenshots
// and of a live view.
func (d *Desktop) Capture(r image.Rectangle) (*image.RGBA, error) {
	screen := image.Rect(0, 0, d.width, d.height)
	if r.Empty() {
		r = screen
	}
	if !r.In(screen) {
		return nil, fmt.Errorf("capture %v: outside the screen %v", r, screen)
	}
	reply, err := xproto.GetImage(d.conn, xproto.ImageFormatZPixmap, xproto.Drawable(d.root),
		int16(r.Min.X), int16(r.Min.Y), uint16(r.Dx()), uint16(r.Dy()), 0xffffffff).Reply()
	if err != nil {
		return nil, fmt.Errorf("capture the display %s: %w", d.display, err)
	}
	img := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	src := reply.Data
	if len(src) < 4*r.Dx()*r.Dy() {
		return nil, fmt.Errorf("capture the display %s: %d bytes for %d×%d pixels (depth %d is not supported)", d.display, len(src), r.Dx(), r.Dy(), reply.Depth)
	}
	// A 24-bit ZPixmap is BGRX, 32 bits a pixel, rows without padding.
	dst := img.Pix
	for i := 0; i+3 < len(dst); i += 4 {
		dst[i], dst[i+1], dst[i+2], dst[i+3] = src[i+2], src[i+1], src[i], 0xff
	}
	return img, nil
}

// lastLines keeps the end of a process's stderr for error messages.
type lastLines struct {
	mu  sync.Mutex
	buf []byte
}

func (l *lastLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > 4096 {
		l.buf = l.buf[len(l.buf)-4096:]
	}
	return len(p), nil
}

func (l *lastLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.TrimSpace(string(l.buf))
}

// Probe starts a small desktop, drives and captures it once, and stops
// it: whether sessions' desktops work on this machine. It returns the
// window manager found ("" when none).
func Probe(ctx context.Context) (string, error) {
	d, err := Start(ctx, Options{Width: 320, Height: 240})
	if err != nil {
		return "", err
	}
	defer d.Close()
	c := NewComputer(d)
	if _, err := c.Do(ctx, api.ComputerArgs{Action: api.ComputerMouseMove, Coordinate: []int{10, 10}}); err != nil {
		return d.WindowManager(), err
	}
	return d.WindowManager(), d.Close()
}

// newConn opens another connection to a display Start made, with its
// cookie (a live view or a test's own X client).
func (d *Desktop) newConn() (*xgb.Conn, error) {
	nc, err := dialDisplay(strings.TrimPrefix(d.display, ":"), d.cookie)
	if err != nil {
		return nil, err
	}
	conn, err := openX(func() (*xgb.Conn, error) { return xgb.NewConnNet(nc) })
	if err != nil {
		nc.Close()
		return nil, err
	}
	return conn, nil
}
