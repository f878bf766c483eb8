package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/internal/desktop"
)

func init() {
	tools[api.ToolComputer] = runComputer
}

// DesktopOptions give a session a desktop (see Options.Desktop).
type DesktopOptions struct {
	// Display is an existing X display to use (a real screen); "" starts
	// a virtual one (Xvfb) at the session's size on first use.
	Display string
	// WindowManager is passed to desktop.Options; "" picks one.
	WindowManager string
}

// desktopFromEnv reads the spawn contract's desktop switch: api.EnvDesktop
// "true" gives the session a desktop, the display in DISPLAY when one is
// set, else a virtual one.
func desktopFromEnv(getenv func(string) string) *DesktopOptions {
	if api.EnvDesktop.Get(getenv) != "true" {
		return nil
	}
	return &DesktopOptions{Display: getenv("DISPLAY")}
}

// programTools start programs that may open windows. They get $DISPLAY
// once the desktop runs, and start it first when the session asked for
// one (spec.desktop); otherwise only the computer tool starts it, so a
// session that never uses a screen costs no Xvfb and its browser stays
// headless.
var programTools = []string{
	api.ToolExec, api.ToolShellStart, api.ToolRecordStart,
	api.ToolBrowserNavigate, api.ToolBrowserClick, api.ToolBrowserType, api.ToolBrowserPress,
	api.ToolBrowserScreenshot, api.ToolBrowserText, api.ToolBrowserEval, api.ToolBrowserConsole,
}

// desktopHost is a session's desktop, started by the first call that needs
// it and closed with the session.
type desktopHost struct {
	opts *DesktopOptions // nil: the session has no desktop
	log  *slog.Logger

	mu sync.Mutex // guards the following
	// size is the session's (welcome.desktop); zero means the default.
	// requested is set when the session gave one.
	size      api.DesktopSize
	requested bool
	d         *desktop.Desktop
	comp      *desktop.Computer
	closed    bool
}

// available reports whether this machine can give the session a desktop.
func (h *desktopHost) available() bool {
	return h.opts != nil && (h.opts.Display != "" || desktop.XvfbPath() != "")
}

func (h *desktopHost) setSize(s *api.DesktopSize) {
	if s == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.size, h.requested = *s, true
}

// wanted reports whether a call of a program tool should start the
// desktop or find it running.
func (h *desktopHost) wanted() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requested || h.d != nil
}

// get returns the desktop, starting it when it is not running.
func (h *desktopHost) get(ctx context.Context) (*desktop.Desktop, *desktop.Computer, error) {
	if h.opts == nil {
		return nil, nil, errors.New("this session has no desktop: the machine's worker runs with --desktop off, " +
			"or its remote was started without " + api.EnvDesktop.String() + "=true")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, errors.New("the session's desktop is closed: the session is ending")
	}
	if h.d != nil {
		return h.d, h.comp, nil
	}
	var d *desktop.Desktop
	var err error
	if h.opts.Display != "" {
		d, err = desktop.Attach(ctx, h.opts.Display, h.log)
	} else {
		d, err = desktop.Start(ctx, desktop.Options{
			Width: h.size.Width, Height: h.size.Height, WindowManager: h.opts.WindowManager,
			Env: cleanEnv(os.Environ()), Logger: h.log,
		})
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start the session's desktop: %w", err)
	}
	h.d, h.comp = d, desktop.NewComputer(d)
	return h.d, h.comp, nil
}

// running returns the desktop when it runs, else nil; it starts nothing.
func (h *desktopHost) running() *desktop.Desktop {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.d
}

// close stops a desktop this session started.
func (h *desktopHost) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.d != nil {
		if err := h.d.Close(); err != nil {
			h.log.Warn("stop the desktop", "err", err)
		}
		h.d = nil
	}
}

// withDisplay gives a call of tool the desktop's $DISPLAY, starting the
// desktop when it is the first call that needs it (see programTools). A desktop that does
// not start leaves env as it is (the computer tool then says why).
func (s *session) withDisplay(ctx context.Context, tool string, env []string) []string {
	if s.desk.opts == nil {
		return env
	}
	if tool != api.ToolComputer && !(slices.Contains(programTools, tool) && s.desk.wanted()) {
		return env
	}
	d, _, err := s.desk.get(ctx)
	if err != nil {
		if tool != api.ToolComputer {
			s.log.Warn("the session's desktop did not start; the call runs without it", "tool", tool, "err", err)
		}
		return env
	}
	vars := map[string]string{}
	for _, kv := range d.Env() {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	return mergeEnv(env, vars)
}

func runComputer(ctx context.Context, c *callEnv, raw json.RawMessage) (any, error) {
	var a api.ComputerArgs
	if err := decodeArgs(raw, &a); err != nil {
		return nil, err
	}
	_, comp, err := c.desktop.get(ctx)
	if err != nil {
		return nil, err
	}
	// A person who took control of the desktop has it until they hand
	// back: the agent's screen actions wait (up to the call's timeout).
	if c.waitControl != nil {
		if err := c.waitControl(ctx); err != nil {
			return nil, fmt.Errorf("computer: a person has control of the desktop and did not hand it back in time: %w", err)
		}
	}
	return comp.Do(ctx, a)
}
